// ChatTemplate (data/chat_template.h) on what a tokenizer_config.json may hold: a template string,
// a list of named templates (the "default" one taken), special tokens as strings or AddedToken
// objects; and every config or conversation it cannot use refused naming the file and the field.
// Renderings of the published templates are checked against transformers by chat_template_reference.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "data/chat_template.h"
#include "kernels/check.h"
#include "tests/expect_contains.h"
#include "tests/input_error.h"
#include "tests/temp_dir.h"

namespace megatrain {
namespace {

using nlohmann::ordered_json;

class ChatTemplateTest : public ::testing::Test {
 public:
  std::string config(const std::string& text) const {
    const std::string p = (dir_ / "tokenizer_config.json").string();
    std::ofstream(p) << text;
    return p;
  }
  test::TempDir dir_{"chat_template"};
};

const ordered_json kChat =
    ordered_json::parse(R"([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}])");

TEST_F(ChatTemplateTest, ReadsTheTemplateAndItsSpecialTokens) {
  const std::string tmpl =
      R"({{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content }}{{ eos_token }}{{ "\n" }}{% endfor %})"
      R"({% if add_generation_prompt %}[assistant] {% endif %})";
  const ChatTemplate a = ChatTemplate::from_tokenizer_config(config(ordered_json{
      {"chat_template", tmpl},
      {"bos_token", "<s>"},
      {"eos_token", {{"content", "</s>"}, {"lstrip", false}}}}.dump()));
  EXPECT_EQ(a.render(kChat, false), "<s>[user] hi</s>\n[assistant] yo</s>\n");
  EXPECT_EQ(a.render(kChat, true), "<s>[user] hi</s>\n[assistant] yo</s>\n[assistant] ");
  const ChatTemplate b = ChatTemplate::from_tokenizer_config(config(ordered_json{
      {"chat_template", {{{"name", "tool_use"}, {"template", "tools"}}, {{"name", "default"}, {"template", tmpl}}}}}
                                                                        .dump()));
  EXPECT_EQ(b.render(kChat, false), "[user] hi\n[assistant] yo\n");  // no special tokens: ""
}

TEST_F(ChatTemplateTest, UnusableConfigsAndConversationsAreRefusedNamingTheFile) {
  const auto error = [&](const std::string& text) {
    return test::input_error_of([&] { ChatTemplate::from_tokenizer_config(config(text)).render(kChat, false); });
  };
  EXPECT_CONTAINS(error("{\"eos_token\": \"x\"}"), "no \"chat_template\"");
  EXPECT_CONTAINS(error("{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"x\"}]}"), "\"default\"");
  EXPECT_CONTAINS(error("not json"), "not valid JSON");
  EXPECT_CONTAINS(error("{\"chat_template\": \"{% for m in messages %}\"}"), "chat_template: not a Jinja template");
  const std::string raising = error(R"({"chat_template": "{{ raise_exception('roles must alternate') }}"})");
  EXPECT_CONTAINS(raising, "tokenizer_config.json: chat_template: rendering failed");
  EXPECT_CONTAINS(raising, "roles must alternate");
}

}  // namespace
}  // namespace megatrain
