// The archives `blz push` keeps in <store>/packed/, so that pushing the same unchanged
// directory (or .safetensors file) again does not pack it again (client/push.h):
//
//   <store>/packed/<fingerprint>.blz    the packed archive
//   <store>/packed/<fingerprint>.json   {"digest":"sha256:..."}: its SHA-256 when it was kept
//   <store>/packed.lock                 flock: entries are added and removed only under it
//
// Safe for any number of concurrent pushes from one machine, of the same input or others:
// - a push that uses a kept archive (found or just kept) holds a shared flock on it (a
//   KeptPack) until the push ends;
// - an entry is removed only while holding an exclusive flock on its archive, taken without
//   waiting, so never while a push uses it; the kernel drops the locks of a process that dies,
//   so a killed push's entry is removed by the next push that keeps one;
// - a new entry is linked in beside the others (never over an existing one) and its .json
//   written under packed.lock, where readers look too: no reader sees half an entry.
// So a push keeps its own entry while it runs; when it keeps a new one it removes every entry
// no running push uses (one archive kept at a time once pushes are done).
#ifndef BLZ_CLIENT_PACK_CACHE_H_
#define BLZ_CLIENT_PACK_CACHE_H_

#include <string>

#include "core/status.h"

namespace blz::client {

// A kept archive in use: holds a shared flock on it (so no other push removes it) until it
// dies. Empty (path() == "") when there is none.
class KeptPack {
 public:
  KeptPack() = default;
  ~KeptPack();
  KeptPack(KeptPack&& other) noexcept;
  KeptPack& operator=(KeptPack&& other) noexcept;
  KeptPack(const KeptPack&) = delete;
  KeptPack& operator=(const KeptPack&) = delete;

  const std::string& path() const { return path_; }
  const std::string& digest() const { return digest_; }  // "sha256:<hex>"

 private:
  friend KeptPack FindKeptPack(const std::string&, const std::string&);
  friend KeptPack KeepPack(const std::string&, const std::string&, const std::string&,
                           const std::string&);
  void Release();

  int fd_ = -1;
  std::string path_;
  std::string digest_;
};

// The archive kept for `fingerprint` in the store at `store_dir`, held, when there is one
// whose SHA-256 still equals its recorded digest; empty otherwise. One whose bytes changed is
// removed (when no other push holds it). Never fails: a store it cannot read has no pack.
KeptPack FindKeptPack(const std::string& store_dir, const std::string& fingerprint);

// Keeps `packed_path` (a complete archive whose SHA-256 is `digest`, in the store's staging
// area, on the store's file system) as the archive of `fingerprint`, and removes the entries
// no push holds. Returns it held: at its kept path, or at `packed_path` when it could not be
// linked in (another running push keeps that input already, or the store is unwritable); the
// file at `packed_path` stays either way (it is the caller's to remove).
KeptPack KeepPack(const std::string& store_dir, const std::string& fingerprint,
                  const std::string& packed_path, const std::string& digest);

}  // namespace blz::client

#endif  // BLZ_CLIENT_PACK_CACHE_H_
