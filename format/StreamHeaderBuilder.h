#pragma once
// The fields every stream header has, whoever writes the stream (dlrecord's launcher stream,
// a recorded process's stream): its name and role, who wrote it (pid, parent pid), when it
// started and with which dlrr. Each writer adds its own fields after.
#include <capnp/message.h>

#include <string>

#include "schema/dlrr.capnp.h"

namespace dlrr {

schema::StreamHeader::Builder initStreamHeader(capnp::MessageBuilder& msg, const std::string& streamName,
                                               schema::StreamHeader::Role role);

}  // namespace dlrr
