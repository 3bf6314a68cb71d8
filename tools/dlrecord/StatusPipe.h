#pragma once
// dlrecord's side of the status pipe: the job's library writes one "pid N: ..." line for what it
// could not record (a full disk stopped its stream, an unsupported framework) and dlrecord shows
// them after the job. The write end is inherited by the job (DLRR_STATUS_FD=FD:INODE, the inode
// so that the library can tell the descriptor is still this pipe); both ends are non-blocking,
// so a library with much to say never stalls the job.
#include <string>
#include <vector>

#include "format/UniqueFd.h"

namespace dlrr {

class StatusPipe {
 public:
  // A pipe; not valid() when none could be made (the job then runs without one).
  StatusPipe();
  bool valid() const { return write_.valid(); }
  int childFd() const { return write_.get(); }
  // "FD:INODE" for DLRR_STATUS_FD ("" when not valid).
  std::string environmentValue() const;
  // After the job started: dlrecord keeps no write end, so reading ends when the job's do.
  void closeWriteEnd() { write_.reset(); }
  // Every complete or final line written so far, without its newline; empty lines dropped.
  std::vector<std::string> readLines();

 private:
  UniqueFd read_, write_;
};

}  // namespace dlrr
