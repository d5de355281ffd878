// One line of `preprocess --format chat` -> the conversation's tokens and, per token, whether
// training learns it.
//
// The line is a JSON object whose "messages" is a non-empty array of objects, each with a string
// "role" and a string "content" (other fields pass to the template as they are). The whole
// rendering (ChatTemplate::render_learned) is tokenized at once — as transformers'
// apply_chat_template(tokenize=True) does, so a token may straddle a learned range's edge — and a
// token is learned when its bytes overlap a learned range (return_assistant_tokens_mask's rule:
// every token from the one holding a range's first character to the one holding its last).
// A tokenizer that normalizes (NFC) reads the rendering normalized, each learned range and each
// stretch between them on its own, the ranges moved to match.
// The tokens are followed by EOD, not learned: a conversation ends with its template's own
// end-of-turn text, and EOD only marks where the next document starts.
//
// Invariant: the decoded tokens spell the (normalized) rendering exactly, byte for byte; a tokenizer that does
// not (add_prefix_space, lstrip/rstrip added tokens) is refused rather than mis-masked.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace megatrain {

class ChatTemplate;
class Tokenizer;

// Appends the conversation of LINE to TOKENS and LEARNED (same length). DataError, without file
// or line (the caller adds them), for a line that is not such an object, a template failing on
// it, or a conversation with nothing learned.
void encode_chat_line(const std::string& line, const ChatTemplate& chat, const Tokenizer& tok,
                      std::vector<int32_t>& tokens, std::vector<uint8_t>& learned);

}  // namespace megatrain
