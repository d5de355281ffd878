// checkpoint_logits CHECKPOINT OUT_FILE ID...: loads a checkpoint as `megatrain generate` does
// (trainer/checkpoint.h checkpoint_model_file; the architecture from the config the checkpoint
// stores) and writes the logits of one forward pass over the token ids ID... to OUT_FILE as raw
// float32 in the machine's byte order, (T, vocab_size) row-major, T = the number of ids; prints
// "T V". Used by hf_logits_reference.py to compare megatrain's logits with transformers'.
// Invariant: the logits are those of GptModel::forward with LossGrad::none and no dropout — the
// training forward pass, not the KV-cached decoder — over the checkpoint's parameters alone, with
// the padded vocabulary columns left out.
#include <fmt/format.h>

#include <cstdio>
#include <exception>
#include <fstream>
#include <string>
#include <vector>

#include "kernels/check.h"
#include "model/gpt.h"
#include "trainer/checkpoint.h"
#include "checkpoint/checkpoint_file.h"
#include "config/config.h"

namespace megatrain {
namespace {

int run(const std::string& checkpoint, const std::string& out_file, const std::vector<int32_t>& ids) {
  const std::string file = checkpoint_model_file(checkpoint);
  const CheckpointMeta meta = checkpoint_file_read_meta(file);
  const ModelConfig mc = load_config_text(meta.config_toml, file + " (its stored config)").model;
  const int T = static_cast<int>(ids.size());
  MT_INPUT_CHECK(T >= 1 && T <= mc.max_seq_len, "{} token ids given; the model takes 1 to max_seq_len = {}", T,
                 mc.max_seq_len);
  for (const int32_t id : ids)
    MT_INPUT_CHECK(id >= 0 && id < mc.vocab_size, "token id {} is outside [0, vocab_size = {})", id, mc.vocab_size);

  // Parameters only: the Adam state is read into the gradient buffer and dropped.
  GptModel model(mc, 1, T);
  checkpoint_file_read(file,
                       checkpoint_tensors_full(model.layout(), model.params(), model.grads(), model.grads(), 0, 1));
  ForwardOptions eval;
  eval.grad = LossGrad::none;
  model.forward(ids.data(), ids.data(), eval);
  const Tensor logits = model.logits();  // (T, Vp)
  const float* p = logits.f32();
  const int64_t Vp = mc.padded_vocab(1), V = mc.vocab_size;

  std::ofstream out(out_file, std::ios::binary | std::ios::trunc);
  MT_INPUT_CHECK(out.good(), "{}: cannot be written", out_file);
  for (int t = 0; t < T; ++t)
    out.write(reinterpret_cast<const char*>(p + t * Vp), static_cast<std::streamsize>(V * sizeof(float)));
  out.close();
  MT_INPUT_CHECK(out.good(), "{}: writing failed", out_file);
  fmt::print("{} {}\n", T, V);
  return 0;
}

}  // namespace
}  // namespace megatrain

int main(int argc, char** argv) {
  if (argc < 4) {
    fmt::print(stderr, "usage: checkpoint_logits CHECKPOINT OUT_FILE ID...\n");
    return 2;
  }
  try {
    std::vector<int32_t> ids;
    for (int i = 3; i < argc; ++i) ids.push_back(static_cast<int32_t>(std::stol(argv[i])));
    return megatrain::run(argv[1], argv[2], ids);
  } catch (const std::exception& e) {
    fmt::print(stderr, "checkpoint_logits: {}\n", e.what());
    return 1;
  }
}
