"""An audio classifier whose frontend is a module returning torch.stft's complex spectrogram
(torchaudio's Spectrogram(power=None) shape), then a mel projection, SpecAugment-like
dropout and a GRU. Usage: spectrogram_frontend.py [--steps N] [--inf-at S]; --inf-at: one
sample of step S's waveform holds an Inf (a corrupt audio file), so the stft's output is the
first non-finite value (complex Infs), the mel's after it. Seeded; prints "step K loss L"."""
import argparse
import math

import torch
from torch import nn


class Spectrogram(nn.Module):
    def __init__(self, n_fft=64, hop=16):
        super().__init__()
        self.n_fft, self.hop = n_fft, hop
        self.register_buffer("window", torch.hann_window(n_fft))

    def forward(self, wav):
        return torch.stft(wav, self.n_fft, self.hop, window=self.window, return_complex=True)


class MelScale(nn.Module):
    def __init__(self, n_freq=33, n_mels=16):
        super().__init__()
        self.register_buffer("fb", torch.rand(n_freq, n_mels))

    def forward(self, spec):
        return torch.log(torch.matmul(spec.abs().pow(2.0).transpose(-1, -2), self.fb) + 1e-6)


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.spec = Spectrogram()
        self.mel = MelScale()
        self.specaug = nn.Dropout2d(0.2)
        self.gru = nn.GRU(16, 24, batch_first=True)
        self.head = nn.Linear(24, 4)

    def forward(self, wav):
        m = self.specaug(self.mel(self.spec(wav)).unsqueeze(1)).squeeze(1)
        out, _ = self.gru(m)
        return self.head(out.mean(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--inf-at", type=int, default=-1)
    args = ap.parse_args()
    torch.manual_seed(0)
    model = Classifier()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    t = torch.arange(800) / 800.0
    for step in range(args.steps):
        y = torch.randint(0, 4, (8,))
        wav = torch.sin(2 * math.pi * (y[:, None] + 1) * 20 * t) + 0.1 * torch.randn(8, 800)
        if step == args.inf_at:
            wav[3, 100] = float("inf")
        loss = nn.functional.cross_entropy(model(wav), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print("step %d loss %.6f" % (step, loss.item()), flush=True)


if __name__ == "__main__":
    main()
