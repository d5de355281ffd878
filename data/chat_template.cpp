// Chat templates through minja (rules in chat_template.h). Invariant: a ChatTemplate that was built
// parsed; render() only evaluates, and every failure of minja's becomes a DataError naming the origin.
#include "data/chat_template.h"

#include <minja.hpp>
#include <nlohmann/json.hpp>

#include <fstream>
#include <utility>

#include "kernels/check.h"

namespace megatrain {
namespace {

// A special token as tokenizer_config.json writes it: a string, or an AddedToken {"content": …}.
std::string token_text(const nlohmann::json& config, const char* key) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) return (*it)["content"];
  return "";
}

}  // namespace

ChatTemplate ChatTemplate::from_tokenizer_config(const std::string& path) {
  std::ifstream in(path);
  MT_DATA_CHECK(in.is_open(), "{}: cannot open; give the tokenizer_config.json of the model's tokenizer", path);
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw DataError(fmt::format("{}: not valid JSON ({}); give the tokenizer_config.json of the model's tokenizer",
                                path, e.what()));
  }
  const auto it = config.find("chat_template");
  MT_DATA_CHECK(it != config.end() && (it->is_string() || it->is_array()),
                "{}: no \"chat_template\" string; this tokenizer has no chat template (add one, or use "
                "--format prompt-completion)",
                path);
  std::string source;
  if (it->is_string()) {
    source = it->get<std::string>();
  } else {
    for (const auto& named : *it)
      if (named.is_object() && named.value("name", "") == "default" && named.contains("template") &&
          named["template"].is_string())
        source = named["template"];
    MT_DATA_CHECK(!source.empty(), "{}: \"chat_template\" is a list without a {{\"name\": \"default\"}} template",
                  path);
  }
  return ChatTemplate(source, token_text(config, "bos_token"), token_text(config, "eos_token"),
                      path + ": chat_template");
}

ChatTemplate::ChatTemplate(const std::string& source, std::string bos_token, std::string eos_token, std::string origin)
    : bos_(std::move(bos_token)), eos_(std::move(eos_token)), origin_(std::move(origin)) {
  try {
    root_ =
        minja::Parser::parse(source, {/*trim_blocks=*/true, /*lstrip_blocks=*/true, /*keep_trailing_newline=*/false});
  } catch (const std::exception& e) {
    throw DataError(fmt::format("{}: not a Jinja template this renderer reads ({})", origin_, e.what()));
  }
}

std::string ChatTemplate::render(const nlohmann::ordered_json& messages, bool add_generation_prompt) const {
  try {
    auto context = minja::Context::make(
        nlohmann::ordered_json({{"messages", messages}, {"add_generation_prompt", add_generation_prompt}}));
    context->set("bos_token", bos_);
    context->set("eos_token", eos_);
    return root_->render(context);
  } catch (const std::exception& e) {
    throw DataError(fmt::format("{}: rendering failed ({})", origin_, e.what()));
  }
}

}  // namespace megatrain
