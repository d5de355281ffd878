// Chat templates through minja (rules in chat_template.h). Invariant: a ChatTemplate that was built
// parsed; render() only evaluates, and every failure of minja's becomes a DataError naming the origin.
#include "data/chat_template.h"

#include <minja.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <regex>
#include <string_view>
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

constexpr std::string_view kBegin = "\xEF\xB7\x90";  // U+FDD0: a {% generation %} block begins
constexpr std::string_view kEnd = "\xEF\xB7\x91";    // U+FDD1: it ends

// SOURCE with each {% generation %} / {% endgeneration %} tag replaced by an `if true` block that
// prints the begin / end mark. The if's opening tag takes the original's left side (its `-`, and
// lstrip_blocks) and its closing tag the right side (`-`, trim_blocks), so the white space around
// the marks is what transformers leaves around the tags. COUNT: how many tags were replaced.
std::string with_generation_marks(const std::string& source, int& count) {
  static const std::regex tag(R"(\{%([-+]?)\s*(end)?generation\s*([-+]?)%\})");
  std::string out;
  size_t at = 0;
  count = 0;
  for (auto it = std::sregex_iterator(source.begin(), source.end(), tag); it != std::sregex_iterator(); ++it) {
    const auto& m = *it;
    out.append(source, at, static_cast<size_t>(m.position(0)) - at);
    out += fmt::format("{{%{} if true %}}{{{{ '{}' }}}}{{% endif {}%}}", m.str(1), m[2].matched ? kEnd : kBegin,
                       m.str(3));
    at = static_cast<size_t>(m.position(0) + m.length(0));
    ++count;
  }
  out.append(source, at);
  return out;
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
  int tags = 0;
  const std::string marked = with_generation_marks(source, tags);
  learn_ = tags > 0 ? &ChatTemplate::learned_by_tags : &ChatTemplate::learned_by_prefixes;
  try {
    root_ =
        minja::Parser::parse(marked, {/*trim_blocks=*/true, /*lstrip_blocks=*/true, /*keep_trailing_newline=*/false});
  } catch (const std::exception& e) {
    throw DataError(fmt::format("{}: not a Jinja template this renderer reads ({})", origin_, e.what()));
  }
}

void ChatTemplate::check_unmarked(const nlohmann::ordered_json& messages) const {
  const std::string dumped = messages.dump();
  MT_DATA_CHECK(dumped.find(kBegin) == std::string::npos && dumped.find(kEnd) == std::string::npos,
                "{}: the conversation holds U+FDD0 or U+FDD1, Unicode noncharacters that mark {{% generation %}} "
                "blocks while rendering; remove them from the messages",
                origin_);
}

std::string ChatTemplate::render(const nlohmann::ordered_json& messages, bool add_generation_prompt) const {
  check_unmarked(messages);
  return render_marked(messages, add_generation_prompt).text;
}

ChatRendering ChatTemplate::render_learned(const nlohmann::ordered_json& messages) const {
  check_unmarked(messages);
  return (this->*learn_)(messages);
}

ChatRendering ChatTemplate::render_marked(const nlohmann::ordered_json& messages, bool add_generation_prompt) const {
  std::string raw;
  try {
    auto context = minja::Context::make(
        nlohmann::ordered_json({{"messages", messages}, {"add_generation_prompt", add_generation_prompt}}));
    context->set("bos_token", bos_);
    context->set("eos_token", eos_);
    raw = root_->render(context);
  } catch (const std::exception& e) {
    throw DataError(fmt::format("{}: rendering failed ({})", origin_, e.what()));
  }
  ChatRendering out;
  out.text.reserve(raw.size());
  constexpr size_t kShut = std::string::npos;
  size_t open = kShut;  // where the open block's text begins
  for (size_t at = 0;;) {
    const size_t b = raw.find(kBegin, at), e = raw.find(kEnd, at);
    const size_t next = std::min(b, e);
    out.text.append(raw, at, next == std::string::npos ? std::string::npos : next - at);
    if (next == std::string::npos) break;
    const bool begins = next == b;
    MT_DATA_CHECK(begins == (open == kShut), "{}: a {{% {} %}} tag inside a generation block, or outside one; "
                  "generation blocks do not nest", origin_, begins ? "generation" : "endgeneration");
    if (begins) {
      open = out.text.size();
    } else {
      if (open < out.text.size()) out.learned.emplace_back(open, out.text.size());
      open = kShut;
    }
    at = next + kBegin.size();
  }
  MT_DATA_CHECK(open == kShut, "{}: a {{% generation %}} block without its {{% endgeneration %}}", origin_);
  return out;
}

ChatRendering ChatTemplate::learned_by_tags(const nlohmann::ordered_json& messages) const {
  return render_marked(messages, false);
}

ChatRendering ChatTemplate::learned_by_prefixes(const nlohmann::ordered_json& messages) const {
  ChatRendering out = render_marked(messages, false);
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i].value("role", "") != "assistant") continue;
    const nlohmann::ordered_json before(messages.begin(), messages.begin() + static_cast<std::ptrdiff_t>(i));
    const nlohmann::ordered_json upto(messages.begin(), messages.begin() + static_cast<std::ptrdiff_t>(i + 1));
    const std::string prompt = render_marked(before, true).text, turn = render_marked(upto, false).text;
    MT_DATA_CHECK(turn.starts_with(prompt) && out.text.starts_with(turn),
                  "{}: messages[{}] (an assistant turn) is rendered differently once later messages follow, so "
                  "its text cannot be found by prefixes (megatrain learns what the rendering of messages[:{}] adds "
                  "to that of messages[:{}] with the generation prompt); mark the assistant text with "
                  "{{% generation %}} … {{% endgeneration %}} in the chat_template",
                  origin_, i, i + 1, i);
    if (prompt.size() < turn.size()) out.learned.emplace_back(prompt.size(), turn.size());
  }
  return out;
}

}  // namespace megatrain
