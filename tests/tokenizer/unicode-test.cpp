// Codepoint classes against the Unicode Character Database, and the UTF-8
// helpers against hand-worked byte sequences.
#include "tokenizer/unicode.h"

#include <gtest/gtest.h>

namespace headroom::unicode {
namespace {

TEST(TokenizerUnicode, ClassesFollowTheGeneralCategory) {
    using C = CodepointClass;
    EXPECT_EQ(codepoint_class('a'), C::Letter);
    EXPECT_EQ(codepoint_class('Z'), C::Letter);
    EXPECT_EQ(codepoint_class('5'), C::Number);
    EXPECT_EQ(codepoint_class('$'), C::Symbol);          // Sc
    EXPECT_EQ(codepoint_class('+'), C::Symbol);          // Sm
    EXPECT_EQ(codepoint_class('`'), C::Symbol);          // Sk
    EXPECT_EQ(codepoint_class('_'), C::Punctuation);     // Pc
    EXPECT_EQ(codepoint_class(0x4E2D), C::Letter);       // 中 Lo
    EXPECT_EQ(codepoint_class(0x3002), C::Punctuation);  // 。 Po
    EXPECT_EQ(codepoint_class(0x0301), C::Mark);         // combining acute, Mn
    EXPECT_EQ(codepoint_class(0x0660), C::Number);       // Arabic-Indic zero, Nd
    EXPECT_EQ(codepoint_class(0x2167), C::Number);       // Roman numeral eight, Nl
    EXPECT_EQ(codepoint_class(0x00BD), C::Number);       // ½, No
    EXPECT_EQ(codepoint_class(0x1F600), C::Symbol);      // 😀 So
    EXPECT_EQ(codepoint_class(0xE000), C::Control);      // private use, Co
    EXPECT_EQ(codepoint_class(0x200D), C::Control);      // ZWJ, Cf
    EXPECT_EQ(codepoint_class(0x10FFFF), C::Undefined);  // noncharacter, Cn
    EXPECT_EQ(codepoint_class(0x110000), C::Undefined);
    EXPECT_EQ(codepoint_class(0x00A0), C::Separator);
}

TEST(TokenizerUnicode, WhitespaceIsTheWhiteSpaceProperty) {
    for (uint32_t c : {0x09u, 0x0Au, 0x0Bu, 0x0Cu, 0x0Du, 0x20u, 0x85u, 0xA0u, 0x1680u, 0x2000u,
                       0x200Au, 0x2028u, 0x2029u, 0x202Fu, 0x205Fu, 0x3000u}) {
        EXPECT_TRUE(codepoint_bits(c) & kWhitespaceBit) << std::hex << c;
    }
    // str.isspace() has these, White_Space does not.
    for (uint32_t c : {0x1Cu, 0x1Du, 0x1Eu, 0x1Fu, 0x200Bu, 0x180Eu, 0xFEFFu, 0u, 0x61u}) {
        EXPECT_FALSE(codepoint_bits(c) & kWhitespaceBit) << std::hex << c;
    }
}

std::vector<uint32_t> decode(std::string_view s) {
    std::vector<uint32_t> out;
    decode_utf8(s, out);
    return out;
}

TEST(TokenizerUnicode, DecodesLikeLlamaCpp) {
    EXPECT_EQ(decode("a\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80"),
              (std::vector<uint32_t>{'a', 0xE9, 0x4E2D, 0x1F600}));
    // Lenient: only continuation bits are checked, so overlong forms and
    // surrogates decode.
    EXPECT_EQ(decode("\xC0\xAF"), (std::vector<uint32_t>{0x2F}));
    EXPECT_EQ(decode("\xED\xA0\x80"), (std::vector<uint32_t>{0xD800}));
    // Anything else is one byte -> U+FFFD.
    EXPECT_EQ(decode("\xFF"), (std::vector<uint32_t>{kReplacement}));
    EXPECT_EQ(decode("\xE4\xB8"), (std::vector<uint32_t>{kReplacement, kReplacement}));
    EXPECT_EQ(decode("\x80x"), (std::vector<uint32_t>{kReplacement, 'x'}));
    EXPECT_EQ(decode("\xF4\x90\x80\x80"), (std::vector<uint32_t>{kReplacement}));  // > U+10FFFF
}

TEST(TokenizerUnicode, EncodesUtf8) {
    std::string s;
    for (uint32_t c : {0x41u, 0xE9u, 0x4E2Du, 0x1F600u, 0x110000u}) append_utf8(c, s);
    EXPECT_EQ(s, "A\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80\xEF\xBF\xBD");
}

TEST(TokenizerUnicode, Gpt2ByteCharacters) {
    // Printable bytes are themselves; the others count up from U+0100.
    EXPECT_EQ(byte_to_gpt2_codepoint('a'), uint32_t{'a'});
    EXPECT_EQ(byte_to_gpt2_codepoint(0x00), 0x100u);
    EXPECT_EQ(byte_to_gpt2_codepoint(' '), 0x120u);   // Ġ
    EXPECT_EQ(byte_to_gpt2_codepoint('\n'), 0x10Au);  // Ċ
    EXPECT_EQ(byte_to_gpt2_codepoint(0xAD), 0x143u);  // the last one
    EXPECT_EQ(byte_to_gpt2_codepoint(0xE9), 0xE9u);
    for (int b = 0; b < 256; ++b) {
        EXPECT_EQ(gpt2_codepoint_to_byte(byte_to_gpt2_codepoint(static_cast<uint8_t>(b))), b);
    }
    EXPECT_EQ(gpt2_codepoint_to_byte(' '), -1);
    EXPECT_EQ(gpt2_codepoint_to_byte(0x144), -1);
}

std::string sanitize(std::string_view s) {
    std::string out;
    append_sanitized_utf8(s, out);
    return out;
}

TEST(TokenizerUnicode, SanitizesMaximalInvalidSubparts) {
    const std::string r = "\xEF\xBF\xBD";
    EXPECT_EQ(sanitize("plain \xE4\xB8\xAD"), "plain \xE4\xB8\xAD");
    EXPECT_EQ(sanitize("a\xE4\xB8"
                       "b"),
              "a" + r + "b");                        // one U+FFFD for a truncated sequence
    EXPECT_EQ(sanitize("\xC0\xAF"), r + r);          // C0 never starts a sequence
    EXPECT_EQ(sanitize("\xED\xA0\x80"), r + r + r);  // surrogates are not UTF-8
    EXPECT_EQ(sanitize("\xF0\x9F\x98"), r);
    EXPECT_EQ(sanitize("\xFF\xFE"), r + r);
}

TEST(TokenizerUnicode, FindsTheIncompleteTail) {
    EXPECT_EQ(incomplete_utf8_suffix(""), 0u);
    EXPECT_EQ(incomplete_utf8_suffix("abc"), 0u);
    EXPECT_EQ(incomplete_utf8_suffix("a\xE4"), 1u);
    EXPECT_EQ(incomplete_utf8_suffix("a\xE4\xB8"), 2u);
    EXPECT_EQ(incomplete_utf8_suffix("a\xE4\xB8\xAD"), 0u);
    EXPECT_EQ(incomplete_utf8_suffix("\xF0\x9F\x98"), 3u);
    EXPECT_EQ(incomplete_utf8_suffix("\xF0\x9F\x98\x80"), 0u);
    EXPECT_EQ(incomplete_utf8_suffix("x\xC0"), 0u);     // can never complete
    EXPECT_EQ(incomplete_utf8_suffix("\xE0\x80"), 0u);  // E0 needs A0..BF next
    EXPECT_EQ(incomplete_utf8_suffix("\xB8\xAD"), 0u);  // no lead byte
    EXPECT_EQ(valid_utf8_prefix("ok\xE4\xB8"), 2u);
}

}  // namespace
}  // namespace headroom::unicode
