"""Hugging Face Trainer as people use it: a model from a config (no download), a dataset of
token ids, TrainingArguments with gradient accumulation, a linear LR schedule with warm-up and a
checkpoint each epoch, a callback of the script's own. ``train.py DELAY REPORT_TO``."""

import hashlib
import sys
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

delay = float(sys.argv[1]) if len(sys.argv) > 1 else 0.0
report_to = sys.argv[2] if len(sys.argv) > 2 else "none"
torch.manual_seed(0)
config = GPT2Config(
    n_layer=2, n_head=2, n_embd=32, vocab_size=97, n_positions=32, bos_token_id=0, eos_token_id=0
)
model = GPT2LMHeadModel(config)
ids = torch.randint(0, 97, (96, 16), generator=torch.Generator().manual_seed(1))
data = [{"input_ids": row, "labels": row} for row in ids]
SKIP = ("train_runtime", "train_samples_per_second", "train_steps_per_second")


class Printer(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        time.sleep(delay)

    def on_log(self, args, state, control, logs=None, **kwargs):
        shown = {k: round(v, 8) if isinstance(v, float) else v for k, v in sorted((logs or {}).items()) if k not in SKIP}
        print("log", state.global_step, shown, flush=True)


args = TrainingArguments(
    output_dir="out", per_device_train_batch_size=4, num_train_epochs=2, logging_steps=1,
    report_to=report_to, save_strategy="epoch", seed=0, use_cpu=True,
    gradient_accumulation_steps=2, lr_scheduler_type="linear", warmup_steps=3,
    disable_tqdm=True, dataloader_num_workers=0, log_level="error",
)
trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[Printer()])
result = trainer.train()
print("global step", result.global_step, "loss", round(result.training_loss, 8))
digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters()))
print("weights", digest.hexdigest())
