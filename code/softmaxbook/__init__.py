"""softmaxbook: the shared package of the softmax book."""
