// Everything a user of ckpt needs: #include "ckpt/ckpt.h".
#pragma once

#include "ckpt/catalog.h"
#include "ckpt/catalog_sync.h"
#include "ckpt/checkpoint_manager.h"
#include "ckpt/communicator.h"
#include "ckpt/device.h"
#include "ckpt/dtype.h"
#include "ckpt/runner.h"
#include "ckpt/sampler.h"
#include "ckpt/state.h"
#include "ckpt/status.h"
#include "ckpt/storage.h"
#include "ckpt/tiered.h"
