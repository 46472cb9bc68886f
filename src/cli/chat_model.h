// What `hyla serve` and `hyla chat` both read from a model folder for chat: the tokens that end a
// reply and the chat template (the demo model's fallback included).
#pragma once

#ifdef HYLA_WITH_PCRE2
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "serve/chat_template.h"
#include "serve/tokenizer.h"

namespace hyla::cli {

/// Token ids that end a reply: <|endoftext|>, <|im_end|>, config.json's eos_token_id and
/// tokenizer_config.json's eos_token, those inside the vocabulary (ascending).
std::vector<int32_t> chat_stop_tokens(const serve::Tokenizer& tokenizer, const std::string& dir,
                                      int64_t vocab_size);

/// The chat template of `dir` (serve::load_chat_template); `model_flag` is the --model given
/// (empty: none), so the demo model's plain fallback template applies only to the demo model.
Result<serve::ChatTemplate> load_model_chat_template(const std::string& dir,
                                                     const std::string& model_flag);

}  // namespace hyla::cli
#endif
