// The three document encoders of preprocess (see document_encoder.h).
#include "data/document_encoder.h"

#include "data/chat_document.h"
#include "data/chat_template.h"
#include "data/tokenizer.h"

namespace megatrain {
namespace {

// Text and --json-key documents: encode(text), EOD; no mask.
class TextEncoder final : public DocumentEncoder {
 public:
  explicit TextEncoder(const Tokenizer& tok) : tok_(tok) {}
  bool masks() const override { return false; }
  void encode(const ReadDocument& doc, std::vector<int32_t>& tokens, std::vector<uint8_t>&) const override {
    const auto ids = tok_.encode(doc.text);
    tokens.insert(tokens.end(), ids.begin(), ids.end());
    tokens.push_back(tok_.eod_id());
  }

 private:
  const Tokenizer& tok_;
};

// Prompt-completion: encode(prompt) not learned, then encode(completion) and EOD learned.
class PairEncoder final : public DocumentEncoder {
 public:
  explicit PairEncoder(const Tokenizer& tok) : tok_(tok) {}
  bool masks() const override { return true; }
  void encode(const ReadDocument& doc, std::vector<int32_t>& tokens, std::vector<uint8_t>& learned) const override {
    const auto prompt = tok_.encode(doc.prompt);
    tokens.insert(tokens.end(), prompt.begin(), prompt.end());
    learned.resize(tokens.size(), 0);
    const auto completion = tok_.encode(doc.text);
    tokens.insert(tokens.end(), completion.begin(), completion.end());
    tokens.push_back(tok_.eod_id());
    learned.resize(tokens.size(), 1);
  }

 private:
  const Tokenizer& tok_;
};

// Chat: the rendered conversation, its assistant text learned (data/chat_document.h).
class ChatEncoder final : public DocumentEncoder {
 public:
  ChatEncoder(const std::string& config, const Tokenizer& tok)
      : chat_(ChatTemplate::from_tokenizer_config(config)), tok_(tok) {}
  bool masks() const override { return true; }
  void encode(const ReadDocument& doc, std::vector<int32_t>& tokens, std::vector<uint8_t>& learned) const override {
    encode_chat_line(doc.text, chat_, tok_, tokens, learned);
  }

 private:
  const ChatTemplate chat_;
  const Tokenizer& tok_;
};

}  // namespace

std::unique_ptr<DocumentEncoder> make_document_encoder(const PreprocessOptions& options, const Tokenizer& tok) {
  switch (options.format) {
    case PreprocessFormat::documents:
      return std::make_unique<TextEncoder>(tok);
    case PreprocessFormat::prompt_completion:
      return std::make_unique<PairEncoder>(tok);
    case PreprocessFormat::chat:
      return std::make_unique<ChatEncoder>(options.chat_config, tok);
  }
  return nullptr;
}

}  // namespace megatrain
