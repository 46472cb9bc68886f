#!/usr/bin/env bash
# Sourced by tools/gpu/model.sh on the H200 device machine, before cmake: the device image has the
# PCRE2 and ICU runtime libraries but not their headers, and installs nothing, so the tokenizer
# (src/serve) would be left out of its build. third_party_peer/tok (git-ignored, carried) holds the
# development machine's headers (Debian 12: /usr/include/pcre2.h, /usr/include/unicode); the
# libraries linked are the device's own. ICU's headers name the library's major version in every
# symbol (uvernum.h), so they are set to the version installed there; the C and C++ APIs the
# tokenizer calls (Normalizer2 NFC, StringPiece, ByteSink) are stable across those versions.
# Sets PKG_CONFIG_PATH when it can; prints why not otherwise.
tok_src=third_party_peer/tok
lib=/usr/lib/x86_64-linux-gnu
if [[ -f /usr/include/pcre2.h && -f /usr/include/unicode/normalizer2.h ]]; then
  echo "tokenizer deps: the system's headers"
elif [[ ! -d $tok_src/include ]]; then
  echo "tokenizer deps: no $tok_src/include carried: the build has no tokenizer"
else
  icu=$(ls "$lib"/libicuuc.so.[0-9]* 2>/dev/null | grep -oE 'so\.[0-9]+$' | head -1 | cut -d. -f2)
  if [[ -z $icu || ! -e $lib/libpcre2-8.so.0 ]]; then
    echo "tokenizer deps: runtime libraries missing (icu '$icu', $(ls "$lib"/libpcre2-8.so* 2>&1 | head -1))"
  else
    tok=$WORK/tok
    rm -rf "$tok"; mkdir -p "$tok/lib/pkgconfig"; cp -r "$tok_src/include" "$tok/"
    sed -i -E "s/(#define U_ICU_VERSION_MAJOR_NUM )[0-9]+/\1$icu/; s/(#define U_ICU_VERSION_SUFFIX _)[0-9]+/\1$icu/; s/(#define U_ICU_VERSION \")[0-9.]+/\1$icu.1/; s/(#define U_ICU_VERSION_SHORT \")[0-9]+/\1$icu/" \
      "$tok/include/unicode/uvernum.h"
    ln -s "$lib/libpcre2-8.so.0" "$tok/lib/libpcre2-8.so"
    ln -s "$lib/libicuuc.so.$icu" "$tok/lib/libicuuc.so"
    ln -s "$(ls "$lib"/libicudata.so."$icu"* | head -1)" "$tok/lib/libicudata.so"
    printf 'Name: libpcre2-8\nDescription: carried headers\nVersion: 10.42\nLibs: -L%s -lpcre2-8\nCflags: -I%s\n' \
      "$tok/lib" "$tok/include" > "$tok/lib/pkgconfig/libpcre2-8.pc"
    printf 'Name: icu-uc\nDescription: carried headers\nVersion: %s.1\nLibs: -L%s -licuuc -licudata\nCflags: -I%s\n' \
      "$icu" "$tok/lib" "$tok/include" > "$tok/lib/pkgconfig/icu-uc.pc"
    export PKG_CONFIG_PATH=$tok/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
    echo "tokenizer deps: carried headers, the device's PCRE2 and ICU $icu"
  fi
fi
