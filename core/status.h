// Status and Result<T>: errors as values.
//
// Every fallible blz function returns a Status (no value) or a Result<T> (a value or a
// Status). Exceptions thrown by libraries (nlohmann-json, std::filesystem, Boost) are caught
// where they enter blz and turned into a Status; they never cross a layer boundary.
//
// The codes are a small pinned set. Their numeric values are stable: they are mapped to HTTP
// statuses (registry/) and process exit codes (cli/) in exactly one place each.
#ifndef BLZ_CORE_STATUS_H_
#define BLZ_CORE_STATUS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace blz {

enum class Code : uint8_t {
  kOk = 0,
  kInvalidArgument = 1,  // the caller's input is malformed (bad name, bad flag, bad file)
  kNotFound = 2,         // a file, tensor, blob, tag or version does not exist
  kCorruption = 3,       // stored or received bytes violate their format
  kDigestMismatch = 4,   // bytes do not hash to the digest that names them
  kTooLarge = 5,         // a length exceeds a cap
  kUnsupported = 6,      // well-formed but not handled (a dtype, a format version)
  kIOError = 7,          // the OS or network failed
  kAlreadyExists = 8,    // refusing to overwrite
  kUnauthorized = 9,     // missing or bad credentials
  kUnavailable = 10,     // a peer could not be reached or answered 5xx
  kInternal = 11,        // a bug: an invariant did not hold
};

// Stable lower-case name of a code, e.g. "corruption".
std::string_view CodeName(Code code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }

  // "corruption: model.safetensors: tensor 'wte': ..." (or "ok").
  std::string ToString() const;

  // Returns a copy whose message is prefixed with `context: `.
  Status WithContext(std::string_view context) const;

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return {Code::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {Code::kNotFound, std::move(m)}; }
inline Status Corruption(std::string m) { return {Code::kCorruption, std::move(m)}; }
inline Status DigestMismatch(std::string m) { return {Code::kDigestMismatch, std::move(m)}; }
inline Status TooLarge(std::string m) { return {Code::kTooLarge, std::move(m)}; }
inline Status Unsupported(std::string m) { return {Code::kUnsupported, std::move(m)}; }
inline Status IOError(std::string m) { return {Code::kIOError, std::move(m)}; }
inline Status AlreadyExists(std::string m) { return {Code::kAlreadyExists, std::move(m)}; }
inline Status Unauthorized(std::string m) { return {Code::kUnauthorized, std::move(m)}; }
inline Status Unavailable(std::string m) { return {Code::kUnavailable, std::move(m)}; }
inline Status Internal(std::string m) { return {Code::kInternal, std::move(m)}; }

// Either a T or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT: implicit by design
    if (std::get<Status>(v_).ok()) v_ = Status(Code::kInternal, "Result built from OK status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  Status status() const { return ok() ? Status() : std::get<Status>(v_); }

  // REQUIRES: ok().
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace blz

#define BLZ_CONCAT_INNER_(a, b) a##b
#define BLZ_CONCAT_(a, b) BLZ_CONCAT_INNER_(a, b)

// Returns the Status from the enclosing function if `expr` is not OK.
#define BLZ_RETURN_IF_ERROR(expr)            \
  do {                                       \
    ::blz::Status blz_status_ = (expr);      \
    if (!blz_status_.ok()) return blz_status_; \
  } while (0)

// `BLZ_ASSIGN_OR_RETURN(auto x, F());` declares x from F()'s value or returns its Status.
#define BLZ_ASSIGN_OR_RETURN(lhs, expr) \
  BLZ_ASSIGN_OR_RETURN_IMPL_(BLZ_CONCAT_(blz_result_, __LINE__), lhs, expr)
#define BLZ_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()

#endif  // BLZ_CORE_STATUS_H_
