#pragma once
// Finite-difference gradient checking in float64, and small helpers for known-value tests.

#include <string>
#include <vector>

#include <ember/ember.h>

#include "op_cases.h"

namespace ember::testing {

struct GradcheckResult {
  double max_error = 0;     // max |analytic - numeric| / max(1, |numeric|) over all input elements
  std::string worst;        // "input 1 element 7: analytic 0.25 numeric 0.2500001"
};

// Draws the case's inputs (float64, CPU, contiguous, deterministic per case name).
std::vector<Tensor> make_inputs(const OpCase& c);
// A non-contiguous tensor (every other element of a wider buffer, last two dims swapped when
// there are two) holding the same values as t.
Tensor make_strided(const Tensor& t);
// Runs the gradcheck of case c on the given inputs (which become leaves requiring grad).
// The scalar checked is sum(fn(inputs) * W) with fixed random weights W, so every output element
// contributes with a different weight.
GradcheckResult gradcheck(const OpCase& c, const std::vector<Tensor>& inputs);

// Elementwise comparison: max |a - b| <= atol + rtol * |b|, shapes equal. Returns "" or a
// description of the first mismatch.
std::string compare_tensors(const Tensor& actual, const Tensor& expected, double atol, double rtol);

}  // namespace ember::testing
