#pragma once
/// @file task_presets.h
/// Run configurations for the classification tasks (data/tasks.h): a model family trained on
/// a task at one of two sizes.
///   paper  the papers' LRA hyper-parameters: AIB-Net Table II (N, D, d_ff, batch,
///          iterations or epochs) for the AIB, Transformer and Extractor families; ETSMLP
///          Table 5 (D, layers, H, norm, LR, WD, dropout) for etsmlp / etsmlp-gate, with
///          Adam betas (0.9, 0.98), 10% warm-up and linear decay (its appendix B). GPU-scale:
///          hours to days on this machine.
///   cpu    ours: the same shape for every family on a task (so the comparison is fair), sized
///          to finish in under an hour on 2 cores (docs/TASKS.md lists the measured times);
///          etsmlp / etsmlp-gate keep their paper's recipe (norm, LR, WD, dropout of Table 5).
/// Family roles (aib-net Sec. III.E and IV.A; etsmlp appendix B): weird-net-a is the AIB
/// encoder (Structure A, bidirectional, mean pooling), weird-net / aib-net / moss the AIB
/// decoder (Structure B, causal, last position), transformer a bidirectional encoder,
/// etsmlp / etsmlp-gate bidirectional encoders, extractor-transformer causal (the Extractor
/// has no bidirectional form). Retrieval models are two-tower (model.cls_pair).
#include <string>

#include "seqmix/train/configuration/config.h"

namespace seqmix::train {

/// Task sizes: "cpu" (default) and "paper".
bool is_task_size(const std::string& size);

/// The configuration of `family` trained on `task` at `size`.
/// @throws std::invalid_argument naming the unknown family, task or size, or a family that
///         cannot run the task (an Extractor with over 100M lag-matrix parameters: one D x D
///         matrix per lag and layer).
RunConfig make_task_config(const std::string& family, const std::string& task,
                           const std::string& size);

}  // namespace seqmix::train
