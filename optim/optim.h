#pragma once
// ember::optim: optimizers, LR schedulers and gradient clipping (#include <ember/optim/optim.h>).

#include "adam.h"
#include "clip.h"
#include "optimizer.h"
#include "scheduler.h"
#include "sgd.h"
