#pragma once
/// @file fashion_mnist.h
/// The Long Range Arena "Image" task on installable data: Fashion-MNIST (Debian package
/// dataset-fashion-mnist, /usr/share/datasets/fashion-mnist; scripts/setup.sh links it to
/// data/fashion-mnist) as sequences of 784 pixel-intensity tokens (row-major, token = the
/// 8-bit intensity, vocabulary 256), 10 classes. Splits: the last `valid` (default 5000) of
/// the 60,000 training images are held out for validation; the 10,000 test images are the
/// test split.
/// Files are IDX (LeCun's format: big-endian magic 0x00000803 for images [N, rows, cols]
/// uint8, 0x00000801 for labels [N] uint8), plain or gzip-compressed.
#include <cstdint>
#include <string>
#include <vector>

#include "seqmix/data/labelled.h"

namespace seqmix::data {

/// An IDX uint8 array: its dimensions and data (row-major).
struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;
};

/// Reads an IDX file of unsigned bytes (gzip or plain).
/// @param expected_rank  the number of dimensions the file must have (3 images, 1 labels).
/// @throws std::runtime_error naming the file and what was expected: missing or unreadable
///         file, bad magic, wrong rank, or data shorter or longer than the header says.
IdxArray read_idx(const std::string& path, int expected_rank);

namespace fashion_mnist {
constexpr int32_t kVocabSize = 256, kClasses = 10, kPixels = 784;
}

using FashionMnistData = LabelledSplits;

/// Loads the four files from `dir` (train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz,
/// t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz).
/// @throws std::runtime_error naming the file for a missing or corrupt file, images that are
///         not 28 x 28, or image and label counts that differ; std::invalid_argument if
///         `valid` is not in [0, 60000).
FashionMnistData load_fashion_mnist(const std::string& dir, int64_t valid = 5000);

}  // namespace seqmix::data
