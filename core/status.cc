#include "core/status.h"

namespace blz {

std::string_view CodeName(Code code) {
  switch (code) {
    case Code::kOk: return "ok";
    case Code::kInvalidArgument: return "invalid argument";
    case Code::kNotFound: return "not found";
    case Code::kCorruption: return "corruption";
    case Code::kDigestMismatch: return "digest mismatch";
    case Code::kTooLarge: return "too large";
    case Code::kUnsupported: return "unsupported";
    case Code::kIOError: return "i/o error";
    case Code::kAlreadyExists: return "already exists";
    case Code::kUnauthorized: return "unauthorized";
    case Code::kUnavailable: return "unavailable";
    case Code::kInternal: return "internal error";
  }
  return "unknown";
}

std::string Status::ToString() const {
  if (ok()) return "ok";
  std::string s(CodeName(code_));
  s += ": ";
  s += message_;
  return s;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  std::string m(context);
  m += ": ";
  m += message_;
  return Status(code_, std::move(m));
}

}  // namespace blz
