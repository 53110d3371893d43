# xgrammar's C++ core (Apache-2.0), from the source distribution that
# scripts/fetch-xgrammar.sh unpacks: a static library `xgrammar` with its
# public headers and the two header-only libraries they need (picojson,
# dlpack). Built here rather than with its own CMakeLists, which turns the
# Python bindings and link-time optimisation on; defined before the project's
# warning and sanitizer options, which are not its business.
set(HEADROOM_XGRAMMAR_DIR "${PROJECT_SOURCE_DIR}/third_party/xgrammar-0.2.8" CACHE PATH
  "xgrammar's unpacked source distribution (scripts/fetch-xgrammar.sh)")
if(NOT EXISTS "${HEADROOM_XGRAMMAR_DIR}/include/xgrammar/xgrammar.h")
  message(FATAL_ERROR "xgrammar's sources are not at ${HEADROOM_XGRAMMAR_DIR}: run "
    "scripts/fetch-xgrammar.sh (scripts/setup.sh does), or set HEADROOM_XGRAMMAR_DIR")
endif()
file(GLOB_RECURSE xgrammar_sources CONFIGURE_DEPENDS "${HEADROOM_XGRAMMAR_DIR}/cpp/*.cc")
list(FILTER xgrammar_sources EXCLUDE REGEX "/cpp/tvm_ffi/")
add_library(xgrammar STATIC ${xgrammar_sources})
target_compile_features(xgrammar PUBLIC cxx_std_17)
target_compile_options(xgrammar PRIVATE -O2 -w)
# Its own language level: clang rejects parts of it as C++20.
set_target_properties(xgrammar PROPERTIES CXX_STANDARD 17 POSITION_INDEPENDENT_CODE ON)
target_include_directories(xgrammar SYSTEM PUBLIC "${HEADROOM_XGRAMMAR_DIR}/include")
target_include_directories(xgrammar SYSTEM PUBLIC "${HEADROOM_XGRAMMAR_DIR}/3rdparty/picojson"
  "${HEADROOM_XGRAMMAR_DIR}/3rdparty/dlpack/include")
target_compile_definitions(xgrammar PUBLIC XGRAMMAR_ENABLE_CPPTRACE=0)
target_link_libraries(xgrammar PUBLIC Threads::Threads)
