#pragma once
// ember::optim: optimizers, LR schedulers, gradient clipping and loss scaling (#include <ember/optim/optim.h>).

#include "adam.h"
#include "clip.h"
#include "grad_scaler.h"
#include "optimizer.h"
#include "scheduler.h"
#include "sgd.h"
