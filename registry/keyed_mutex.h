// A mutex per string key, created on demand and dropped when nobody holds or waits for it.
// Used to run one computation per key at a time (e.g. one patch computation per (from, to)
// pair, one writer per upload session) while different keys proceed in parallel.
#ifndef BLZ_REGISTRY_KEYED_MUTEX_H_
#define BLZ_REGISTRY_KEYED_MUTEX_H_

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

namespace blz::registry {

class KeyedMutex {
 public:
  // Holds the key's mutex until destroyed.
  class Lock {
   public:
    Lock(KeyedMutex* owner, std::string key) : owner_(owner), key_(std::move(key)) {
      owner_->Acquire(key_);
    }
    ~Lock() { owner_->Release(key_); }
    Lock(const Lock&) = delete;
    Lock& operator=(const Lock&) = delete;

   private:
    KeyedMutex* owner_;
    std::string key_;
  };

  // Number of keys currently held or waited for (for tests).
  size_t ActiveKeys() {
    std::lock_guard lock(mu_);
    return entries_.size();
  }

 private:
  struct Entry {
    std::mutex mu;
    int users = 0;  // holders + waiters; guarded by KeyedMutex::mu_
  };

  void Acquire(const std::string& key) {
    std::shared_ptr<Entry> e;
    {
      std::lock_guard lock(mu_);
      auto& slot = entries_[key];
      if (!slot) slot = std::make_shared<Entry>();
      ++slot->users;
      e = slot;
    }
    e->mu.lock();
  }

  void Release(const std::string& key) {
    std::lock_guard lock(mu_);
    auto it = entries_.find(key);
    if (it == entries_.end()) return;  // unreachable: Acquire created it
    it->second->mu.unlock();
    if (--it->second->users == 0) entries_.erase(it);
  }

  std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<Entry>> entries_;
};

}  // namespace blz::registry

#endif  // BLZ_REGISTRY_KEYED_MUTEX_H_
