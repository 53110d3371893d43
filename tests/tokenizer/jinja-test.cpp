// The Jinja interpreter on small hand-written templates. Expected outputs are
// worked out by hand from jinja2's documented semantics as transformers
// configures it (trim_blocks, lstrip_blocks, Python str()/repr() of values).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "tokenizer/chat-template.h"

namespace headroom {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::ordered_json;

constexpr std::time_t kFixedNow = 1753533296;  // 2025-07-26 12:34:56 UTC

std::string render(const std::string& source, const json& context = json::object(),
                   const jinja::RenderLimits& limits = {}) {
    auto tmpl = ChatTemplate::from_string(source, "<s>", "</s>");
    tmpl.set_limits(limits);
    ChatTemplateOptions options;
    options.add_generation_prompt = false;
    options.extra_context = context;
    options.now = kFixedNow;
    return tmpl.apply({}, options);
}

std::string render_error(const std::string& source, const json& context = json::object(),
                         const jinja::RenderLimits& limits = {}) {
    try {
        render(source, context, limits);
    } catch (const Error& e) {
        return e.what();
    }
    return "(no error)";
}

struct Case {
    const char* source;
    const char* expected;
};

void expect_renders(const std::vector<Case>& cases, const json& context = json::object()) {
    for (const auto& c : cases) EXPECT_EQ(render(c.source, context), c.expected) << c.source;
}

TEST(Jinja, WhitespaceControl) {
    expect_renders({
        // trim_blocks drops the newline after a block tag; one trailing newline of the source goes.
        {"{% if true %}\nyes\n{% endif %}\n", "yes\n"},
        {"x\n\n", "x\n"},
        // lstrip_blocks drops indentation before a block or comment tag, not before {{.
        {"a\n    {% if true %}b{% endif %}", "a\nb"},
        {"  {{ 'x' }}", "  x"},
        {"a\n  {# note #}\nb", "a\nb"},
        {"  {%+ if true %}x{% endif %}", "  x"},
        // '-' strips all whitespace, newlines included, on its side.
        {"a \n {{- 'b' -}} \n c", "abc"},
        {"{% for i in [1, 2] -%}\n  {{ i }}\n{%- endfor %}", "12"},
        {"{% if true +%}\nx{% endif %}", "\nx"},
        {"{% raw %}{{ not evaluated }}{% endraw %}", "{{ not evaluated }}"},
        {"a\r\nb\rc", "a\nb\nc"},
        {"{# a comment #}text", "text"},
        // Whitespace means Python's: no-break and ideographic spaces count.
        {"{{- 'a' -}}\xe3\x80\x80"
         "b{{\xc2\xa0'c'\xc2\xa0}}",
         "abc"},
        {"\xc2\xa0\xc2\xa0{% if true %}y{% endif %}", "y"},
    });
}

TEST(Jinja, ArithmeticAndLiterals) {
    expect_renders({
        {"{{ 7 // 2 }},{{ -7 // 2 }},{{ -7 % 3 }},{{ 7 / 2 }},{{ 4 / 2 }},{{ 2 ** 10 }}",
         "3,-4,2,3.5,2.0,1024"},
        {"{{ 1 + 2 * 3 }},{{ (1 + 2) * 3 }},{{ 10 - 2 - 3 }},{{ 2 ** 3 ** 2 }}", "7,9,5,64"},
        {"{{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1e-5 }} {{ 100.0 }} {{ 1.5e3 }} {{ 0.0001 }}",
         "0.30000000000000004 1e+16 1e-05 100.0 1500.0 0.0001"},
        {"{{ 'a' ~ 1 ~ none ~ true }}", "a1NoneTrue"},
        {"{{ 'ab' * 3 }}{{ [0] * 2 }}", "ababab[0, 0]"},
        {"{{ [1, 'a', none, true, 1.5] }}", "[1, 'a', None, True, 1.5]"},
        {"{{ {'k': [1, 2], 'j': {'x': none}} }}", "{'k': [1, 2], 'j': {'x': None}}"},
        {"{{ (1,) }} {{ (1, 2) }} {{ () }}", "(1,) (1, 2) ()"},
        {R"({{ ["it's", 'say "hi"', 'both \' "'] }})", R"(["it's", 'say "hi"', 'both \' "'])"},
        {R"({{ 'tab\there\u00e9\x41\n' }})",
         "tab\there\xc3\xa9"
         "A\n"},
        {"{{ 'adjacent' 'strings' }}", "adjacentstrings"},
        {"{{ -2 ** 2 }} {{ -(2 ** 2) }}", "4 -4"},
        {"{{ 1 + 1.5 }} {{ true + 1 }} {{ 3 % 2.5 }}", "2.5 2 0.5"},
    });
}

TEST(Jinja, ComparisonsAndLogic) {
    expect_renders({
        {"{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ 'a' != 'b' }} {{ [1, 2] == [1, 2] }}",
         "True False True True True"},
        {"{{ 'b' in 'abc' }} {{ 2 not in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'z' in {'k': 1} }}",
         "True False True False"},
        {"{{ 0 or 'x' }} {{ 'a' and 'b' }} {{ none or [] }} {{ not 0 }} {{ not 'a' }}",
         "x b [] True False"},
        {"{{ 'y' if 1 > 2 else 'n' }}|{{ 'y' if 1 > 2 }}|{{ 'a' if false else 'b' if true else 'c' "
         "}}",
         "n||b"},
        {"{{ 'abc' < 'abd' }} {{ [1, 2] < [1, 3] }} {{ 2 <= 2 }} {{ 3 >= 4 }}",
         "True True True False"},
    });
}

TEST(Jinja, SubscriptsAndSlices) {
    expect_renders({
        {"{{ 'abc'[::-1] }} {{ 'h\xc3\xa9llo'[1] }} {{ 'h\xc3\xa9llo'[1:3] }} {{ 'abc'[-1] }}",
         "cba \xc3\xa9 \xc3\xa9l c"},
        {"{{ [1, 2, 3, 4][1::2] }} {{ [1, 2, 3][:-1] }} {{ [1, 2, 3][5:] }} {{ [1, 2, 3][::-2] }}",
         "[2, 4] [1, 2] [] [3, 1]"},
        {"{{ [1, 2][5] }}|{{ {'a': 1}['a'] }}|{{ {'a': {'b': 2}}.a.b }}|{{ [[1, 2]][0][1] }}",
         "|1|2|2"},
    });
}

TEST(Jinja, Loops) {
    expect_renders({
        {"{% for x in 'ab' %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}"
         "{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }};{% endfor %}",
         "10TrueFalse221;21FalseTrue210;"},
        {"{% for x in [1, 2, 3] %}{{ loop.previtem }}-{{ loop.nextitem }};{% endfor %}",
         "-2;1-3;2-;"},
        {"{% for x in range(10) if x is odd %}{{ x }}/{{ loop.length }} {% endfor %}",
         "1/5 3/5 5/5 7/5 9/5 "},
        {"{% for x in [] %}x{% else %}empty{% endfor %}", "empty"},
        {"{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}"
         "{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}",
         "0134"},
        {"{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}", "a=1;b=2;"},
        {"{% for k in {'a': 1, 'b': 2} %}{{ k }}{% endfor %}", "ab"},
        {"{% for a in [1, 2] %}{% for b in 'xy' %}{{ loop.index }}{{ a }}{{ b }} {% endfor %}{% "
         "endfor %}",
         "11x 21y 12x 22y "},
        {"{% for x in [1, 2, 3] %}{{ loop.cycle('a', 'b') }}{% endfor %}", "aba"},
    });
}

TEST(Jinja, Scoping) {
    expect_renders({
        // A set inside a loop lives for one iteration and never changes the outer variable.
        {"{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}",
         "231"},
        {"{% for i in [1, 2] %}{% if loop.first %}{% set a = 1 %}{% endif %}[{{ a }}]{% endfor %}",
         "[1][]"},
        {"{% if true %}{% set y = 5 %}{% endif %}{{ y }}", "5"},
        {"{% for i in [1] %}{% set inner = 1 %}{% endfor %}[{{ inner }}]", "[]"},
        {"{% set ns = namespace(total=0, seen=false) %}{% for i in [1, 2, 3] %}"
         "{% set ns.total = ns.total + i %}{% endfor %}{{ ns.total }} {{ ns.seen }}",
         "6 False"},
        {"{% set a, b = 1, 2 %}{{ b }}{{ a }}", "21"},
        {"{% with a = 1 %}{{ a }}{% endwith %}[{{ a }}]", "1[]"},
    });
}

TEST(Jinja, MacrosAndBlocks) {
    expect_renders({
        {"{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}"
         "{{ greet('Ann') }} {{ greet('Bob', punct='?') }} {{ greet(name='Cy') }}",
         "Hi Ann! Hi Bob? Hi Cy!"},
        // A macro sees top-level variables as they are when it is called.
        {"{% macro show() %}{{ g }}{% endmacro %}{% set g = 5 %}{{ show() }}", "5"},
        {"{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% "
         "endmacro %}"
         "{{ fact(5) }}",
         "120"},
        {"{% macro wrap() %}[{{ caller() }}]{% endmacro %}{% call wrap() %}inner{% endcall %}",
         "[inner]"},
        {"{% set s | upper %}abc{% endset %}{{ s }}", "ABC"},
        {"{% set s %}a{{ 1 + 1 }}{% endset %}{{ s }}{{ s|length }}", "a22"},
        {"{% filter upper %}abc{{ 'd' }}{% endfilter %}", "ABCD"},
        {"{% generation %}kept{% endgeneration %}", "kept"},
    });
}

TEST(Jinja, StringFilters) {
    expect_renders({
        {"{{ '  hello world  '|trim|title }}|{{ 'hELLO'|capitalize }}|{{ 'ab'|upper }}|{{ "
         "'AB'|lower }}",
         "Hello World|Hello|AB|ab"},
        {"{{ 'xxhixx'|trim('x') }}|{{ 'aaa'|replace('a', 'b', 2) }}|{{ 'abc'|length }}|{{ "
         "'abc'|reverse }}",
         "hi|bba|3|cba"},
        {"{{ 'a\nb\n\nc'|indent(2) }}|{{ 'a\nb'|indent(2, true) }}|{{ 'a\n'|indent }}",
         "a\n  b\n\n  c|  a\n  b|a\n"},
        {"{{ '%s-%03d|%.2f|%5s|%-4s|'|format('a', 7, 3.14159, 'r', 'l') }}",
         "a-007|3.14|    r|l   |"},
        {"{{ '<a href=\"x\">'|e }}|{{ 'x'|safe + '<' }}|{{ '<' ~ 'x'|safe }}",
         "&lt;a href=&#34;x&#34;&gt;|x&lt;|<x"},
        {"{{ '42'|int + 1 }} {{ 'x'|int(7) }} {{ 3.7|int }} {{ '2.5'|float }} {{ 2.567|round(2) }} "
         "{{ 42|string ~ '!' }}",
         "43 7 3 2.5 2.57 42!"},
        {"{{ 'ab cd'|wordcount if false else 'skip' }}", "skip"},
    });
}

TEST(Jinja, SequenceFilters) {
    expect_renders({
        {"{{ [3, 1, 2]|first }}{{ [3, 1, 2]|last }}{{ [3, 1, 2]|reverse|list }}{{ [3, 1, 2]|length "
         "}}",
         "32[2, 1, 3]3"},
        {"{{ ['b', 'A', 'c']|sort }} {{ [3, 1, 2]|sort(reverse=true) }} {{ ['b', "
         "'A']|sort(case_sensitive=true) }}",
         "['A', 'b', 'c'] [3, 2, 1] ['A', 'b']"},
        {"{{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3, 4]|reject('even')|list }} {{ [0, 1, "
         "'']|select|list }}",
         "[1, 3] [1, 3] [1]"},
        {"{{ ['a', 'b']|map('upper')|list }} {{ [1, 2, 3]|join(', ') }} {{ [1, 2, 3]|sum }}",
         "['A', 'B'] 1, 2, 3 6"},
        {"{{ {'b': 1, 'a': 2}|dictsort }} {{ {'b': 1, 'a': 2}|items|list }} {{ {'a': 1}|length }}",
         "[('a', 2), ('b', 1)] [('b', 1), ('a', 2)] 1"},
        {"{{ ['a', 'A', 'b']|unique|list }} {{ [3, 1, 2]|min }}{{ [3, 1, 2]|max }} {{ 'abc'|list "
         "}}",
         "['a', 'b'] 13 ['a', 'b', 'c']"},
        {"{{ [1, 2, 3, 4, 5]|batch(2)|list }}", "[[1, 2], [3, 4], [5]]"},
        // map/select return generators: always true, no length.
        {"{{ 'yes' if ([] | select('odd')) else 'no' }}", "yes"},
    });
}

TEST(Jinja, AttributeFiltersOnMessages) {
    const json context = {{"msgs",
                           {{{"role", "system"}, {"content", "S"}},
                            {{"role", "user"}, {"content", "U1"}},
                            {{"role", "assistant"}, {"content", "A"}},
                            {{"role", "user"}, {"content", "U2"}}}}};
    expect_renders(
        {
            {"{{ msgs|selectattr('role', 'equalto', 'user')|map(attribute='content')|join('|') }}",
             "U1|U2"},
            {"{{ msgs|rejectattr('role', 'in', ['user', 'system'])|map(attribute='content')|list "
             "}}",
             "['A']"},
            {"{{ msgs|map(attribute='missing', default='-')|join }}", "----"},
            {"{{ (msgs|selectattr('role', 'eq', 'user')|list|last).content }}", "U2"},
            {"{{ msgs[1:]|map(attribute='role')|unique|list }}", "['user', 'assistant']"},
            {"{{ msgs|sort(attribute='content')|map(attribute='content')|join(',') }}",
             "A,S,U1,U2"},
            {"{{ msgs[0].role }} {{ msgs[0]['content'] }} {{ msgs[0].tool_calls is defined }}",
             "system S False"},
        },
        context);
}

TEST(Jinja, Tojson) {
    expect_renders({
        {"{{ {'a': [1, '\xc3\xa9', none, true, 1.5]}|tojson }}",
         R"({"a": [1, "é", null, true, 1.5]})"},
        {"{{ {'a': [1], 'b': {}}|tojson(indent=2) }}",
         "{\n  \"a\": [\n    1\n  ],\n  \"b\": {}\n}"},
        {"{{ '\xc3\xa9\"\\n'|tojson(ensure_ascii=true) }}", R"("\u00e9\"\n")"},
        {"{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }}", R"({"a": 2, "b": 1})"},
        {"{{ [1, 2]|tojson(separators=(',', ':')) }}", "[1,2]"},
        {"{{ {1: 'x', none: 'y'}|tojson }}", R"({"1": "x", "null": "y"})"},
    });
    EXPECT_THAT(render_error("{{ missing|tojson }}"), HasSubstr("not JSON serializable"));
}

TEST(Jinja, Tests) {
    expect_renders({
        {"{{ x is defined }} {{ x is undefined }} {{ none is none }} {{ 'a' is string }} {{ {} is "
         "mapping }}",
         "False True True True True"},
        {"{{ [] is iterable }} {{ 'a' is sequence }} {{ 1 is number }} {{ true is boolean }} {{ 1 "
         "is integer }}",
         "True True True True True"},
        {"{{ 1.0 is float }} {{ 3 is divisibleby 3 }} {{ 'a' is in 'abc' }} {{ 2 is even }} {{ 3 "
         "is odd }}",
         "True True True True True"},
        {"{{ 'ab' is lower }} {{ 'AB' is upper }} {{ 1 is equalto 1 }} {{ 2 is gt 1 }} {{ none is "
         "not none }}",
         "True True True True False"},
        {"{{ {} is string }} {{ 'x' is mapping }} {{ true is number }} {{ true is integer }}",
         "False False True False"},
    });
}

TEST(Jinja, Methods) {
    expect_renders({
        {"{{ ' a b '.strip() }}|{{ 'a,b,,c'.split(',') }}|{{ ' a b  c '.split() }}|{{ 'a b "
         "c'.split(' ', 1) }}",
         "a b|['a', 'b', '', 'c']|['a', 'b', 'c']|['a', 'b c']"},
        {"{{ 'abc'.startswith('ab') }}|{{ 'abc'.endswith(('x', 'c')) }}|{{ 'Hello'.upper() }}|{{ "
         "'a-b'.replace('-', '+') }}",
         "True|True|HELLO|a+b"},
        {"{{ 'x y'.title() }}|{{ 'xxaxx'.lstrip('x') }}|{{ 'xxaxx'.rstrip('x') }}|{{ "
         "'a\\nb'.splitlines() }}",
         "X Y|axx|xxa|['a', 'b']"},
        {"{{ '{0}-{name}-{0}'.format(1, name='n') }}|{{ '{:>4}|{:.2f}'.format('a', 2) }}",
         "1-n-1|   a|2.00"},
        {"{{ '<think>a</think>\\n\\nb'.split('</think>')[-1].lstrip('\\n') }}", "b"},
        {"{{ ', '.join(['a', 'b']) }}|{{ 'banana'.count('a') }}|{{ 'banana'.find('n') }}|{{ "
         "'x'.rfind('y') }}",
         "a, b|3|2|-1"},
        {"{% set d = {'a': 1, 'items': 2} %}{{ d.get('a') }} {{ d.get('z', 0) }} {{ d.get('z') }} "
         "{{ d.keys()|list }} {{ d.values()|list }} {{ d['items'] }} {{ d.a }}",
         "1 0 None ['a', 'items'] [1, 2] 2 1"},
        {"{{ [1, 2, 2].count(2) }} {{ [1, 2].index(2) }}", "2 1"},
    });
}

TEST(Jinja, Globals) {
    expect_renders({
        {"{{ range(3)|list }} {{ range(1, 10, 3)|list }} {{ range(3, 0, -1)|list }}",
         "[0, 1, 2] [1, 4, 7] [3, 2, 1]"},
        {"{{ strftime_now('%Y-%m-%d %H:%M') }} {{ strftime_now('%d %b %Y') }}",
         "2025-07-26 12:34 26 Jul 2025"},
        {"{{ dict(a=1, b=2) }} {{ dict({'x': 1}, y=2) }} {{ namespace(a=1).a }}",
         "{'a': 1, 'b': 2} {'x': 1, 'y': 2} 1"},
        {"{{ raise_exception is defined }} {{ bos_token }}{{ eos_token }} {{ tools }}",
         "True <s></s> None"},
    });
    EXPECT_THAT(render_error("a\nb\n{{ raise_exception('Roles must alternate') }}"),
                HasSubstr("line 3: Roles must alternate"));
}

TEST(Jinja, UndefinedBehavesLikeJinja2) {
    expect_renders({
        {"[{{ missing }}][{{ missing|length }}][{{ missing|default('d') }}][{{ missing|trim }}]",
         "[][0][d][]"},
        {"{% for x in missing %}x{% endfor %}{{ missing is defined }}", "False"},
        {"{% set d = {} %}[{{ d.x }}]{{ d.x is defined }}{{ d['x'] is defined }}", "[]FalseFalse"},
        {"{{ none.x is defined }} {{ 'str'.x is defined }} {{ [].append is defined }}",
         "False False False"},
        {"{{ ''|default('e', true) }} {{ none|default('n') }} {{ missing == missing }}",
         "e None True"},
    });
    EXPECT_THAT(render_error("{{ missing.attr }}"), HasSubstr("'missing' is undefined"));
    EXPECT_THAT(render_error("{% set d = {} %}{{ d.x.y }}"),
                HasSubstr("'dict object' has no attribute 'x'"));
    EXPECT_THAT(render_error("{{ missing + 1 }}"), HasSubstr("'missing' is undefined"));
    EXPECT_THAT(render_error("{{ missing() }}"), HasSubstr("'missing' is undefined"));
}

TEST(Jinja, RuntimeErrorsNameTheLine) {
    EXPECT_THAT(render_error("{{ 'a' + 1 }}"),
                HasSubstr("line 1: can only concatenate str (not \"int\") to str"));
    EXPECT_THAT(render_error("x\n{{ 1 // 0 }}"),
                HasSubstr("line 2: integer division or modulo by zero"));
    EXPECT_THAT(render_error("\n\n{{ 'x'|nosuchfilter }}"),
                HasSubstr("line 3: no filter named 'nosuchfilter'"));
    EXPECT_THAT(render_error("{{ 1 is nosuchtest }}"), HasSubstr("no test named 'nosuchtest'"));
    EXPECT_THAT(render_error("{% set l = [] %}{{ l.append(1) }}"),
                HasSubstr("access to attribute 'append' of 'list' object is unsafe"));
    EXPECT_THAT(render_error("{% set x = 1 %}{% set x.y = 2 %}"),
                HasSubstr("non-namespace object"));
    EXPECT_THAT(render_error("{{ 1 < 'a' }}"),
                HasSubstr("'<' not supported between instances of 'int' and 'str'"));
    EXPECT_THAT(render_error("{% for a, b in [1] %}{% endfor %}"),
                HasSubstr("'int' object is not iterable"));
    EXPECT_THAT(render_error("{{ raise_exception('multi\nline') }}"), HasSubstr("multi\\nline"));
    // One line: nothing a template raises can break the message into several.
    EXPECT_EQ(render_error("{{ raise_exception('a\nb') }}").find('\n'), std::string::npos);
}

TEST(Jinja, SyntaxErrorsNameLineAndColumn) {
    EXPECT_THAT(
        render_error("line one\n{% if x %}\nno end"),
        HasSubstr("syntax error at line 3, column 7: unexpected end of template, expected 'elif'"));
    EXPECT_THAT(render_error("{{ 1 + }}"), HasSubstr("line 1, column 8: unexpected '}}'"));
    EXPECT_THAT(render_error("\n  {% frobnicate %}"),
                HasSubstr("line 2, column 6: unknown or unexpected tag 'frobnicate'"));
    EXPECT_THAT(render_error("{{ 'unterminated }}"),
                HasSubstr("line 1, column 4: unterminated string literal"));
    EXPECT_THAT(render_error("{{ (1 }}"), HasSubstr("line 1"));
    EXPECT_THAT(render_error("{{ 1 ]}}"), HasSubstr("unexpected ']'"));
    EXPECT_THAT(render_error("{# never closed"), HasSubstr("missing end of comment tag"));
    EXPECT_THAT(render_error("{{ x ! y }}"), HasSubstr("unexpected character '!'"));
    EXPECT_THAT(render_error("{% for x in y %}{% endif %}"),
                HasSubstr("unknown or unexpected tag 'endif'"));
    EXPECT_THAT(render_error("{% include 'other.jinja' %}"), HasSubstr("tag 'include'"));
}

TEST(Jinja, LimitsStopHostileTemplates) {
    jinja::RenderLimits fast;  // a smaller step budget keeps these quick
    fast.max_steps = 200'000;
    EXPECT_THAT(render_error("{{ range(10**9)|length }}"), HasSubstr("Range too big"));
    EXPECT_THAT(
        render_error(
            "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
            json::object(), fast),
        HasSubstr("budget of 200000 evaluation steps"));
    // Quadratic list building is paid for per item copied.
    EXPECT_THAT(render_error("{% set ns = namespace(l=[]) %}{% for i in range(100000) %}"
                             "{% set ns.l = ns.l + [i] %}{% endfor %}",
                             json::object(), fast),
                HasSubstr("evaluation steps"));
    EXPECT_THAT(render_error("{{ 'x' * 10**9 }}"), HasSubstr("exceeds the limit"));
    EXPECT_THAT(render_error("{{ 'x' * 10**18 * 10 }}"), HasSubstr("exceeds the limit"));
    EXPECT_THAT(render_error("{{ [0] * 10**9 }}"), HasSubstr("exceeds the limit"));
    EXPECT_THAT(render_error("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}"),
                HasSubstr("exceeds the limit"));
    // A small list repeating a large string cannot print into an enormous text.
    EXPECT_THAT(render_error("{% set big = 'x' * 1000000 %}{{ [big] * 100 }}"),
                HasSubstr("exceeds the limit"));
    // Many strings, each within limits, cannot add up past the memory budget.
    jinja::RenderLimits memory;
    memory.max_memory_bytes = 32 << 20;
    EXPECT_THAT(render_error("{% set ns = namespace(l=[]) %}{% for i in range(1000) %}"
                             "{% set ns.l = ns.l + ['x' * 1000000 ~ i] %}{% endfor %}",
                             json::object(), memory),
                HasSubstr("memory limit of 33554432 bytes"));
    EXPECT_THAT(render_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"),
                HasSubstr("macro calls nested deeper than"));
    EXPECT_THAT(render_error("{% macro f(a=f()) %}{% endmacro %}{{ f() }}"),
                HasSubstr("macro calls nested deeper than"));
    EXPECT_THAT(render_error("{{ " + std::string(1000, '(') + "1" + std::string(1000, ')') + " }}"),
                HasSubstr("nested more than"));
    std::string deep_blocks;
    for (int i = 0; i < 200; ++i) deep_blocks += "{% if true %}";
    EXPECT_THAT(render_error(deep_blocks), HasSubstr("nested more than"));
    EXPECT_THAT(render_error("{% set ns = namespace(x=[]) %}{% for i in range(1000) %}{% set ns.x "
                             "= [ns.x] %}{% endfor %}"),
                HasSubstr("nested deeper than"));
    // A namespace holding itself neither loops forever nor leaks.
    EXPECT_THAT(render_error("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}"),
                HasSubstr("nested deeper"));
    EXPECT_THAT(render_error("{{ 2 ** 64 }}"), HasSubstr("integer overflow"));
    EXPECT_THAT(render_error("{{ '%s %s'|format(1) }}"), HasSubstr("not enough arguments"));

    jinja::RenderLimits small;
    small.max_output_bytes = 100;
    EXPECT_THAT(render_error("{% for i in range(200) %}x{% endfor %}", json::object(), small),
                HasSubstr("exceeds the limit of 100 bytes"));
    small = {};
    small.max_steps = 1000;
    EXPECT_THAT(render_error("{% for i in range(2000) %}{% endfor %}", json::object(), small),
                HasSubstr("budget of 1000 evaluation steps"));
}

// Random edits of a real-looking template must give an output or one Error, never a crash.
TEST(Jinja, MutatedTemplatesNeverCrash) {
    const std::string base =
        "{%- set ns = namespace(sys='') -%}{% for m in messages %}{% if m.role == 'system' %}"
        "{% set ns.sys = m.content|trim %}{% else %}{{ '<|' ~ m['role'] ~ '|>\\n' + m.content }}"
        "{{ (m.content.split('x')|map('upper')|list)[0] if m.content else '' }}{% endif %}{% "
        "endfor %}"
        "{% macro f(a, b=[1, {'k': (2, 3)}]) %}{{ a|tojson(indent=2) }}{{ b[1:] }}{% endmacro %}"
        "{{ f(ns.sys ~ eos_token) }}{% if add_generation_prompt %}{{ 1 // 1 }}{% endif %}";
    const std::string alphabet = "{}%#-+()[]'\"|.,:~=!<>*/ \nabc01";
    std::mt19937 rng(20261129);
    const json context = {
        {"messages",
         {{{"role", "system"}, {"content", " s "}}, {{"role", "user"}, {"content", "xyx"}}}}};
    int n_ok = 0, n_error = 0;
    for (int i = 0; i < 2000; ++i) {
        std::string s = base;
        const int n_edits = 1 + static_cast<int>(rng() % 4);
        for (int k = 0; k < n_edits; ++k) {
            const size_t at = rng() % s.size();
            switch (rng() % 3) {
                case 0:
                    s.erase(at, 1 + rng() % 3);
                    break;
                case 1:
                    s.insert(at, 1, alphabet[rng() % alphabet.size()]);
                    break;
                default:
                    s[at] = alphabet[rng() % alphabet.size()];
            }
        }
        try {
            render(s, context);
            ++n_ok;
        } catch (const Error&) {
            ++n_error;
        }
    }
    EXPECT_EQ(n_ok + n_error, 2000);
    EXPECT_GT(n_ok, 0);
    EXPECT_GT(n_error, 0);
}

}  // namespace
}  // namespace headroom
