"""skorch's own training loop: NeuralNetClassifier.fit over a small numpy dataset (its
DataLoader, its train/valid split, its callbacks computing metrics after each epoch)."""
import numpy as np
import torch
from torch import nn
from skorch import NeuralNetClassifier


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 2))

    def forward(self, X):
        return self.net(X)


def main():
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((400, 20)).astype(np.float32)
    y = (X[:, 0] + X[:, 1] > 0).astype(np.int64)
    net = NeuralNetClassifier(MLP, criterion=nn.CrossEntropyLoss, max_epochs=3, lr=0.1,
                              batch_size=32, iterator_train__shuffle=True, verbose=1)
    net.fit(X, y)
    print("final train loss %.6f" % net.history[-1, "train_loss"])


if __name__ == "__main__":
    main()
