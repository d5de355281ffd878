// A Hugging Face chat template (tokenizer_config.json's `chat_template`, a Jinja template) rendered
// as transformers' apply_chat_template renders it: Jinja with trim_blocks and lstrip_blocks, over
// `messages`, `add_generation_prompt`, `bos_token` and `eos_token`, with `raise_exception` and
// `tojson` (minja, Google's C++ Jinja renderer). No `strftime_now` is defined, so a template that
// would print today's date (Llama 3.1's) prints its own fixed one and a rendering depends on its
// input only.
#pragma once
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>

namespace minja {
class TemplateNode;
}

namespace megatrain {

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

 private:
  std::shared_ptr<minja::TemplateNode> root_;
  std::string bos_, eos_, origin_;
};

}  // namespace megatrain
