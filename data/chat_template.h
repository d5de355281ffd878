// A Hugging Face chat template (tokenizer_config.json's `chat_template`, a Jinja template) rendered
// as transformers' apply_chat_template renders it: Jinja with trim_blocks and lstrip_blocks, over
// `messages`, `add_generation_prompt`, `bos_token` and `eos_token`, with `raise_exception` and
// `tojson` (minja, Google's C++ Jinja renderer). No `strftime_now` is defined, so a template that
// would print today's date (Llama 3.1's) prints its own fixed one and a rendering depends on its
// input only.
//
// What training learns of a conversation (render_learned), decided once per template:
//   - a template with {% generation %} … {% endgeneration %} blocks: the text those blocks emit,
//     exactly what transformers' return_assistant_tokens_mask learns;
//   - any other template: each assistant message's own text, found by prefixes — for message i,
//     from the end of the rendering of messages[:i] with the generation prompt to the end of the
//     rendering of messages[:i+1]. Both must be prefixes of the whole conversation's rendering;
//     a template that renders earlier turns differently once later ones follow (Qwen3's drops the
//     thinking of earlier answers) is refused for that conversation, with the fix: add the tags.
// The characters U+FDD0 and U+FDD1 (Unicode noncharacters) mark the blocks while rendering, so a
// conversation holding either is refused.
#pragma once
#include <cstddef>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <utility>
#include <vector>

namespace minja {
class TemplateNode;
}

namespace megatrain {

// A conversation's rendering and the byte ranges [begin, end) of it that training learns, in order.
struct ChatRendering {
  std::string text;
  std::vector<std::pair<size_t, size_t>> learned;
};

class ChatTemplate {
 public:
  // The template of a tokenizer_config.json: `chat_template` a string, or a list of {"name",
  // "template"} whose "default" is taken; `bos_token`/`eos_token` strings or {"content": …} (""
  // when absent). DataError naming the file and the field when it has no usable template.
  static ChatTemplate from_tokenizer_config(const std::string& path);
  // SOURCE: the template; ORIGIN names it in errors ("FILE: chat_template").
  ChatTemplate(const std::string& source, std::string bos_token, std::string eos_token, std::string origin);

  // MESSAGES: a JSON array of {"role", "content", …}. DataError naming the origin when the template
  // fails on it (raise_exception, a missing field).
  std::string render(const nlohmann::ordered_json& messages, bool add_generation_prompt) const;
  // The whole conversation (no generation prompt) and what is learned of it (rule above).
  // DataError as render's, and for a template the prefix rule cannot read on these messages.
  ChatRendering render_learned(const nlohmann::ordered_json& messages) const;

 private:
  // DataError when MESSAGES hold a mark character; render and render_learned check once, and the
  // renderings below (of MESSAGES and their prefixes) rely on it.
  void check_unmarked(const nlohmann::ordered_json& messages) const;
  ChatRendering render_marked(const nlohmann::ordered_json& messages, bool add_generation_prompt) const;
  ChatRendering learned_by_tags(const nlohmann::ordered_json& messages) const;
  ChatRendering learned_by_prefixes(const nlohmann::ordered_json& messages) const;

  std::shared_ptr<minja::TemplateNode> root_;
  ChatRendering (ChatTemplate::*learn_)(const nlohmann::ordered_json&) const;  // chosen by the source
  std::string bos_, eos_, origin_;
};

}  // namespace megatrain
