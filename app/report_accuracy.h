// Predicted against measured, per run: every timing report holds the planner's
// predicted step time beside the measured one, and the memory model's peak per rank beside
// the allocator's. flexsp report prints the distribution of the step-time error and the
// peak-memory error from them.
//
// Choices: the error is predicted / measured - 1 (positive: the model is pessimistic);
// the first step is left out when there are others (start-up, as the throughput figures);
// steps without a prediction (0: a mode that has none) are left out. Peak memory is one
// figure per run: the largest allocator peak over the steps against the prediction.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <string>

namespace flexsp {

struct PredictionAccuracy {
  int64_t steps = 0;  // steps with a prediction (0: none; the other figures are 0)
  double median = 0, p10 = 0, p90 = 0, max_abs = 0;  // of the step-time error
  double predicted_ms = 0;                            // mean predicted step over those steps
  double mem_predicted_gb = 0, mem_measured_gb = 0;   // 0 predicted: the report has none
  double mem_error() const { return mem_predicted_gb > 0 ? mem_predicted_gb / mem_measured_gb - 1 : 0; }
};

// From a report.h5's /steps group (path names the file in errors).
PredictionAccuracy prediction_accuracy(hid_t steps, const std::string& path);

// "step time: median +1.2%, p10 ... p90 ..., max |error| ... over N steps; peak memory:
// predicted X GB, measured Y GB (+z%)", or what is missing.
std::string prediction_accuracy_text(const PredictionAccuracy& a);

}  // namespace flexsp
