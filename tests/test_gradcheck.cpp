// The f64 finite-difference gradcheck of every op case (tests/op_cases.h), on contiguous inputs
// and on strided (non-contiguous) inputs with the same values — which must also give the same
// forward result. One TEST_CASE per family, so ctest runs the families in parallel.

#include <catch2/catch.hpp>

#include "gradcheck.h"

using namespace ember;
using namespace ember::testing;

namespace {

void run_cases(void (*add_cases)(std::vector<OpCase>&)) {
  std::vector<OpCase> cases;
  add_cases(cases);
  REQUIRE(cases.size() > 0);
  for (const OpCase& c : cases) {
    const std::vector<Tensor> inputs = make_inputs(c);
    GradcheckResult r = gradcheck(c, inputs);
    INFO(c.name << " (contiguous): max error " << r.max_error << " at " << r.worst);
    CHECK(r.max_error <= c.tol);
    if (!c.strided) continue;
    std::vector<Tensor> strided;
    for (const Tensor& t : inputs) strided.push_back(make_strided(t));
    for (const Tensor& t : strided)
      if (t.numel() > 1) CHECK_FALSE(t.is_contiguous());
    GradcheckResult rs = gradcheck(c, strided);
    INFO(c.name << " (strided): max error " << rs.max_error << " at " << rs.worst);
    CHECK(rs.max_error <= c.tol);
    NoGradGuard g;
    const std::string diff = compare_tensors(c.fn(strided), c.fn(inputs), 1e-12, 1e-12);
    INFO(c.name << " strided vs contiguous forward: " << diff);
    CHECK(diff.empty());
  }
}

}  // namespace

TEST_CASE("gradcheck: elementwise", "[gradcheck]") { run_cases(add_elementwise_cases); }
TEST_CASE("gradcheck: views", "[gradcheck]") { run_cases(add_view_cases); }
TEST_CASE("gradcheck: reductions", "[gradcheck]") { run_cases(add_reduce_cases); }
TEST_CASE("gradcheck: gemm", "[gradcheck]") { run_cases(add_gemm_cases); }
TEST_CASE("gradcheck: conv", "[gradcheck]") { run_cases(add_conv_cases); }
TEST_CASE("gradcheck: pooling", "[gradcheck]") { run_cases(add_pool_cases); }
TEST_CASE("gradcheck: batch norm", "[gradcheck]") { run_cases(add_batchnorm_cases); }
TEST_CASE("gradcheck: dropout", "[gradcheck]") { run_cases(add_dropout_cases); }
TEST_CASE("gradcheck: shape and index ops", "[gradcheck]") { run_cases(add_index_cases); }
TEST_CASE("gradcheck: softmax", "[gradcheck]") { run_cases(add_softmax_cases); }
TEST_CASE("gradcheck: losses", "[gradcheck]") { run_cases(add_loss_cases); }
