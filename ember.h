#pragma once
// ember: a from-scratch deep-learning framework for training image classifiers.
// The umbrella header: #include <ember/ember.h>

#include "core/autograd.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/tensor.h"
#include "kernels/cpu/parallel.h"
#include "layers/elementwise.h"
#include "layers/linalg.h"
#include "layers/nn_functional.h"
#include "layers/reduce.h"
#include "layers/shape_ops.h"
#include "layers/init.h"
#include "layers/module.h"
#include "layers/modules.h"
#include "optim/optim.h"
