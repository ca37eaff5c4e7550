#include "store/sql_pool.h"

#include <string>
#include <utility>

namespace blz::store::sql {

Pool::Lease::~Lease() {
  if (pool_ != nullptr) pool_->Release(std::move(static_cast<Database&>(*this)));
}

Pool::Pool(Database first, std::function<Result<Database>()> connect, size_t max_connections,
           std::optional<std::chrono::milliseconds> wait)
    : engine_(first.engine()),
      label_(first.label()),
      timer_(std::make_shared<QueryTimer>()),
      connect_(std::move(connect)),
      max_(max_connections < 1 ? 1 : max_connections),
      wait_(wait) {
  first.set_timer(timer_);
  idle_.push_back(std::move(first));
  open_ = 1;
}

Result<Pool::Lease> Pool::Acquire() {
  std::unique_lock lock(mu_);
  auto ready = [&] { return !idle_.empty() || open_ < max_; };
  if (!wait_.has_value()) {
    freed_.wait(lock, ready);
  } else if (!freed_.wait_for(lock, *wait_, ready)) {
    return Unavailable(label_ + ": no free metadata connection within " +
                       std::to_string(wait_->count()) + " ms (all " + std::to_string(max_) +
                       " busy; raise the URL's pool=N or pool_timeout=SECONDS)");
  }
  if (!idle_.empty()) {
    Database db = std::move(idle_.back());
    idle_.pop_back();
    return Lease(std::move(db), this);
  }
  ++open_;  // a slot for the connection being opened, outside the lock
  lock.unlock();
  Result<Database> db = connect_ ? connect_() : Internal(label_ + ": the pool cannot connect");
  if (!db.ok()) {
    lock.lock();
    --open_;
    lock.unlock();
    freed_.notify_one();
    return db.status();
  }
  db->set_timer(timer_);
  return Lease(std::move(*db), this);
}

void Pool::Release(Database db) {
  {
    std::lock_guard lock(mu_);
    idle_.push_back(std::move(db));
  }
  freed_.notify_one();
}

size_t Pool::open_connections() {
  std::lock_guard lock(mu_);
  return open_;
}

Result<PoolOptions> TakePoolOptions(const std::string& url) {
  PoolOptions options;
  const size_t q = url.find('?');
  if (q == std::string::npos) {
    options.url = url;
    return options;
  }
  std::string rest;
  size_t start = q + 1;
  while (start <= url.size()) {
    size_t end = url.find('&', start);
    if (end == std::string::npos) end = url.size();
    const std::string param = url.substr(start, end - start);
    start = end + 1;
    const size_t eq = param.find('=');
    const std::string key = param.substr(0, eq);
    if (key != "pool" && key != "pool_timeout") {
      if (!param.empty()) rest += (rest.empty() ? "" : "&") + param;
      continue;
    }
    const std::string value = eq == std::string::npos ? "" : param.substr(eq + 1);
    const int64_t most = key == "pool" ? 1000 : 86400;
    int64_t n = 0;
    bool valid = !value.empty() && value.size() <= 6;
    for (char c : value) valid = valid && c >= '0' && c <= '9';
    if (valid) n = std::stoll(value);
    if (!valid || n < 1 || n > most) {
      return InvalidArgument("metadata database URL: " + key + "='" + value +
                             "' is not a whole number from 1 to " + std::to_string(most));
    }
    if (key == "pool") {
      options.connections = size_t(n);
    } else {
      options.timeout_seconds = n;
    }
  }
  options.url = url.substr(0, q) + (rest.empty() ? "" : "?" + rest);
  return options;
}

}  // namespace blz::store::sql
