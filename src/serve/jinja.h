// A Jinja template engine for chat templates (tokenizer_config.json's `chat_template`). It renders
// what @huggingface/jinja (npm; transformers.js's renderer) renders, byte for byte, on the chat
// templates it was checked with (tests/serve/jinja_reference_test.cpp): the same whitespace rules
// (trim_blocks, lstrip_blocks, a final newline dropped), printing (true/false, lists and dicts as
// JSON, 1.0 as "1.0" but 1.0 ~ "" as "1"), tojson (Python's ", " / ": " separators, keys in their
// order), undefined attributes (x.missing.deeper is undefined, not an error) and loose `==`.
//
// Covered: {{ }}, {% %}, {# #} with "-" whitespace control; if / elif / else; for (loop.index,
// index0, revindex, revindex0, first, last, length, previtem, nextitem; `else`; `if` filter; tuple
// unpacking; break / continue); set (tuples, blocks, namespace attributes); macros (defaults,
// varargs, kwargs) and call blocks (caller); filter blocks; literals; arithmetic (+ - * / // % **),
// ~, comparisons, and / or / not, in / not in, x if c else y; is-tests; subscripts and slices;
// the globals namespace, range, raise_exception, strftime_now (%Y %m %d %b %B %H %M). Filters:
// tojson (indent, ensure_ascii, sort_keys, separators), length/count, trim, upper, lower, title,
// capitalize, join, first, last, default/d, list, string, int, float, abs, round, bool, items,
// keys, values, dictsort, map (attribute= or a filter), select / reject / selectattr / rejectattr,
// unique, sort, reverse, replace, indent, safe. Tests: defined, undefined, none, boolean, true,
// false, string, number, integer, float, mapping, iterable, sequence, callable, odd, even, lower,
// upper, equalto/eq/sameas, ne, divisibleby, in, gt/lt/ge/le. Methods: str.upper, lower, title,
// capitalize, strip/lstrip/rstrip(chars), startswith/endswith (str or tuple), split(sep,
// maxsplit), replace(old, new, count), join, format, .length; dict.get, items, keys, values,
// dictsort; list.length.
//
// Where @huggingface/jinja fails or differs from Python's Jinja2 in a way a template cannot rely
// on, this follows Jinja2: strip / lstrip / rstrip honour their `chars` argument (HF ignores it);
// select, reject, round, divisibleby and the like exist; iterating undefined yields nothing and a
// string its characters; division by zero is an error. upper, lower,
// title and capitalize change ASCII letters only.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <string>

#include "core/error.h"

namespace hyla::serve {

namespace jinja {
struct Program;
}

class JinjaTemplate {
 public:
  /// Parses a template. Errors (kInvalidArgument) read "line L, column C: what was found and
  /// what was expected".
  static Result<JinjaTemplate> parse(std::string source);

  /// Renders with `variables`, a JSON object whose keys become the template's variables (beside
  /// the globals true, false, none, namespace, range, raise_exception, strftime_now). Errors
  /// (kInvalidArgument): an unknown filter or test, calling something undefined, a type a
  /// filter or operator does not take, raise_exception(msg) — each with the line and column of
  /// the expression; the output is capped at 256 MiB and the work at 100 million steps.
  Result<std::string> render(const nlohmann::ordered_json& variables) const;

  const std::string& source() const { return *source_; }

 private:
  std::shared_ptr<const std::string> source_;
  std::shared_ptr<const jinja::Program> program_;
};

}  // namespace hyla::serve
