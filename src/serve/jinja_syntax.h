// The parsed form of a Jinja template (jinja_parse.cpp builds it, jinja_render.cpp runs it) and
// the error both throw internally; jinja.h's Template turns that error into a Status carrying the
// template's line and column.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "serve/jinja_value.h"

namespace hyla::serve::jinja {

/// Offset of an error raised where the position is not known yet (value helpers); the
/// interpreter replaces it with the offset of the expression being evaluated.
constexpr uint32_t kNoOffset = UINT32_MAX;

/// A template error at `offset` (a byte offset into the template source as written).
class Error : public std::runtime_error {
 public:
  Error(uint32_t at, const std::string& message) : std::runtime_error(message), offset(at) {}
  uint32_t offset;
};

struct Node;
using NodePtr = std::unique_ptr<Node>;

/// One node of the tree. Which fields a kind uses:
///   kText          text                      literal template text
///   kOutput        a                         {{ a }}
///   kIf            a, body, orelse           {% if a %}body{% else %}orelse{% endif %} (elif
///                                            nests an kIf in orelse)
///   kFor           a (target), b (iterable), c (filter or null), body, orelse
///   kSet           a (target), b (value, or null for a block set), body
///   kMacro         text (name), args (parameters: kName, or kKeyword with a default), body
///   kCallBlock     a (the kCall), args (caller's parameters), body
///   kFilterBlock   a (a kFilter whose a is null), body
///   kBreak, kContinue
///   kLiteral       value                     str, int, float
///   kName          text
///   kList, kTuple  args
///   kDict          args (key, value, key, value, ...)
///   kAttribute     a, text                   a.text (also a.0: text "0")
///   kIndex         a, b                      a[b]
///   kSlice         a, args (start, stop, step; each may be null)
///   kCall          a (callee), args (positional, then kKeyword)
///   kKeyword       text, a                   name=a in a call or parameter list
///   kFilter        a (operand), text, args   a | text(args)
///   kTest          a, text, args, negate     a is [not] text(args)
///   kUnary         text ("not", "-", "+"), a
///   kBinary        text (operator), a, b
///   kTernary       a (if true), b (condition), c (else; null: undefined when false)
struct Node {
  enum class Kind {
    kText,
    kOutput,
    kIf,
    kFor,
    kSet,
    kMacro,
    kCallBlock,
    kFilterBlock,
    kBreak,
    kContinue,
    kLiteral,
    kName,
    kList,
    kTuple,
    kDict,
    kAttribute,
    kIndex,
    kSlice,
    kCall,
    kKeyword,
    kFilter,
    kTest,
    kUnary,
    kBinary,
    kTernary
  };
  Kind kind;
  uint32_t offset = 0;  ///< where it starts in the template source
  std::string text;
  Value value;
  bool negate = false;
  NodePtr a, b, c;
  std::vector<NodePtr> args;
  std::vector<NodePtr> body, orelse;
};

struct Program {
  std::vector<NodePtr> body;
};

/// Preprocesses (HF's trim_blocks + lstrip_blocks, a final newline dropped), tokenizes and parses
/// `source`. Throws Error.
Program parse_program(const std::string& source);

}  // namespace hyla::serve::jinja
