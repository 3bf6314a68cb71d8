#pragma once
// The BatchMap (format/BatchMap.h) of one recorded stream: read from its Batch and Snapshot
// events and the blobs the trace still holds. dltrace info shows it; dlreplay --without-data
// refuses with it before running anything when the steps asked for are outside it.
#include "format/BatchMap.h"

namespace dlrr {

class StreamReader;

// Damage ends the walk: what precedes it is mapped.
BatchMap batchMapOf(StreamReader& stream);

}  // namespace dlrr
