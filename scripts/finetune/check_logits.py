"""The end of scripts/finetune_demo.sh: transformers loads the folder `megatrain export` wrote, and its
logits on a chat prompt (rendered by apply_chat_template with the generation prompt) must equal
megatrain's own on the same ids (checkpoint_logits over the trained checkpoint), within float32
round-off: max |ours - theirs| <= 3e-5 * max(1, max |theirs|) (transformers in float64). Then
transformers answers the prompt greedily, to show what the fine-tuning taught.

Usage: check_logits.py --exported DIR --checkpoint DIR --logits-tool BIN --question TEXT
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy
import torch
import transformers

LLAMA_DATE = "26 Jul 2024"  # megatrain defines no strftime_now: Llama 3.1's template's own date


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for flag in ("--exported", "--checkpoint", "--logits-tool", "--question"):
        p.add_argument(flag, required=True)
    args = p.parse_args()
    tok = transformers.PreTrainedTokenizerFast.from_pretrained(args.exported)
    model = transformers.AutoModelForCausalLM.from_pretrained(args.exported, torch_dtype=torch.float64).eval()
    messages = [{"role": "user", "content": args.question}]
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, date_string=LLAMA_DATE)
    with torch.no_grad():
        theirs = model(torch.tensor([ids])).logits[0].numpy()
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "logits.f32")
        subprocess.run([args.logits_tool, args.checkpoint, out] + [str(i) for i in ids], check=True,
                       stdout=subprocess.DEVNULL)
        ours = numpy.fromfile(out, dtype=numpy.float32).reshape(theirs.shape).astype(numpy.float64)
    scale = max(1.0, float(numpy.abs(theirs).max()))
    err = float(numpy.abs(ours - theirs).max()) / scale
    print(f"check_logits: {len(ids)} prompt tokens x {theirs.shape[1]} logits: max |megatrain - transformers| = "
          f"{err:.2e} of the scale {scale:.2f} (limit 3e-5)")
    if err > 3e-5:
        print("check_logits: FAIL: the exported model's logits differ from megatrain's")
        return 1
    # Greedy decoding by hand (Debian's torch 1.13 cannot import what model.generate needs).
    answer, eot = [], tok.convert_tokens_to_ids("<|eot_id|>")
    with torch.no_grad():
        while len(answer) < 24 and (not answer or answer[-1] != eot):
            answer.append(int(model(torch.tensor([ids + answer])).logits[0, -1].argmax()))
    print(f"check_logits: transformers answers {args.question!r} with "
          f"{tok.decode(answer, skip_special_tokens=True)!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
