#pragma once
// Whether a stream still holds every blob a Value tree (a batch, a snapshot) refers to. A
// budgeted trace drops old snapshots' bulk files (format/TraceDir.h), so a Snapshot event may
// outlive its tensors: such a snapshot can no longer start a replay, and readers say so.
#include "format/StreamReader.h"
#include "schema/dlrr.capnp.h"

namespace dlrr {

bool valueBlobsPresent(StreamReader& stream, schema::Value::Reader v);

}  // namespace dlrr
