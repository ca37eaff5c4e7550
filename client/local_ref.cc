#include "client/local_ref.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <map>

#include "client/manifest.h"
#include "client/registry_client.h"
#include "core/digest.h"

namespace blz::client {
namespace {

bool IsLowerHex(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

std::string Candidates(const std::map<std::string, std::string>& found) {
  std::string out;
  for (const auto& [digest, what] : found) {
    out += (out.empty() ? "" : "; ") + digest + (what.empty() ? "" : " (" + what + ")");
  }
  return out;
}

std::string NameOf(const HeldVersion& v) {
  if (v.registry.empty()) return "";
  std::string tags;
  for (const std::string& t : v.tags) tags += (tags.empty() ? ":" : ",") + t;
  return v.registry + "/" + v.repository + tags;
}

}  // namespace

std::string AsDigestPrefix(std::string_view text) {
  std::string_view hex = text;
  if (StartsWith(hex, "sha256:")) hex.remove_prefix(7);
  if (hex.size() < kMinDigestPrefixHex || hex.size() > 64 || !IsLowerHex(hex)) return "";
  return "sha256:" + std::string(hex);
}

Result<LooseReference> ParseLooseReference(std::string_view text, const AddressDefaults& defaults) {
  LooseReference loose;
  const size_t at = text.rfind('@');
  if (at != std::string_view::npos && StartsWith(text.substr(at + 1), "sha256:")) {
    std::string_view hex = text.substr(at + 8);
    if (hex.size() < 64 && IsLowerHex(hex)) {
      if (hex.size() < kMinDigestPrefixHex) {
        return InvalidArgument("invalid reference '" + std::string(text) +
                               "': a short digest needs at least 12 hex digits (sha256:<hex>, "
                               "as `blz ls` prints it)");
      }
      std::string_view head = text.substr(0, at);
      const size_t slash = head.rfind('/');
      if (head.substr(slash == std::string_view::npos ? 0 : slash + 1).find(':') !=
          std::string_view::npos) {
        return InvalidArgument("invalid reference '" + std::string(text) +
                               "': give NAME@sha256:<hex> or NAME:TAG, not both");
      }
      BLZ_ASSIGN_OR_RETURN(loose.ref, ParseReference(head, defaults));
      loose.ref.tag.clear();
      loose.digest_prefix = "sha256:" + std::string(hex);
      return loose;
    }
  }
  BLZ_ASSIGN_OR_RETURN(loose.ref, ParseReference(text, defaults));
  return loose;
}

bool OfflineFromEnv() {
  const char* v = std::getenv("BLZ_OFFLINE");
  if (v == nullptr) return false;
  std::string s(v);
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s == "1" || s == "true" || s == "yes" || s == "on";
}

Result<HeldVersion> FindHeldByPrefix(const LocalStore& store, const Reference& ref,
                                     std::string_view prefix) {
  BLZ_ASSIGN_OR_RETURN(std::vector<HeldVersion> all, store.AllVersions());
  std::map<std::string, std::string> found;  // archive digest -> names
  std::optional<HeldVersion> best;
  for (const HeldVersion& v : all) {
    if (!StartsWith(v.digest, prefix) &&
        (v.manifest_digest.empty() || !StartsWith(v.manifest_digest, prefix))) {
      continue;
    }
    std::string& names = found[v.digest];
    const std::string name = NameOf(v);
    if (!name.empty()) names += (names.empty() ? "" : " ") + name;
    const bool mine = v.registry == ref.registry.ToString() && v.repository == ref.name;
    if (!best.has_value() || (mine && (best->registry != v.registry ||
                                       best->repository != v.repository))) {
      best = v;
    }
  }
  if (found.empty()) {
    return NotFound(std::string(prefix) + " matches no version held in " + store.dir() +
                    " (see `blz ls`)");
  }
  if (found.size() > 1) {
    return InvalidArgument(std::string(prefix) + " is ambiguous: it starts " +
                           std::to_string(found.size()) + " digests held: " + Candidates(found) +
                           "; give more hex digits");
  }
  return *best;
}

Result<Reference> ResolveDigestPrefix(const LocalStore& store, const LooseReference& loose,
                                      RegistryClient* client) {
  Reference ref = loose.ref;
  if (loose.digest_prefix.empty()) return ref;
  Result<HeldVersion> held = FindHeldByPrefix(store, ref, loose.digest_prefix);
  if (held.ok()) {
    ref.digest = StartsWith(held->digest, loose.digest_prefix) ? held->digest
                                                                : held->manifest_digest;
    return ref;
  }
  if (held.status().code() != Code::kNotFound || client == nullptr) return held.status();
  // The registry's versions of the repository: each tag's manifest and its archive.
  BLZ_ASSIGN_OR_RETURN(std::vector<std::string> tags, client->ListTags(ref.name));
  std::map<std::string, std::string> found;  // digest -> tags
  for (const std::string& tag : tags) {
    Result<ManifestResponse> m = client->GetManifest(ref.name, tag);
    if (!m.ok()) continue;
    std::string match;
    if (StartsWith(m->digest, loose.digest_prefix)) {
      match = m->digest;
    } else if (Result<ModelManifest> parsed = ParseManifest(m->bytes);
               parsed.ok() && StartsWith(parsed->archive_digest, loose.digest_prefix)) {
      match = parsed->archive_digest;
    }
    if (match.empty()) continue;
    std::string& names = found[match];
    names += (names.empty() ? ref.name + ":" : ",") + tag;
  }
  const std::string where = ref.registry.ToString() + "/" + ref.name;
  if (found.empty()) {
    return NotFound(loose.digest_prefix + " matches no version held locally nor any tag of " +
                    where);
  }
  if (found.size() > 1) {
    return InvalidArgument(loose.digest_prefix + " is ambiguous among the tags of " + where +
                           ": " + Candidates(found) + "; give more hex digits");
  }
  ref.digest = found.begin()->first;
  return ref;
}

Result<std::optional<HeldVersion>> FindHeld(const LocalStore& store, const Reference& ref) {
  const std::string registry = ref.registry.ToString();
  BLZ_ASSIGN_OR_RETURN(std::vector<HeldVersion> held, store.Versions(registry, ref.name));
  for (HeldVersion& v : held) {
    const bool match = ref.by_digest()
                           ? v.digest == ref.digest || v.manifest_digest == ref.digest
                           : std::find(v.tags.begin(), v.tags.end(), ref.tag) != v.tags.end();
    if (match) {
      v.registry = registry;
      v.repository = ref.name;
      return std::optional<HeldVersion>(std::move(v));
    }
  }
  return std::optional<HeldVersion>();
}

Result<HeldVersion> TagLocally(LocalStore* store, const LooseReference& src, const Reference& dst) {
  if (dst.by_digest()) {
    return InvalidArgument("tag: the new name needs a tag (NAME:TAG), not a digest: " +
                           dst.ToString());
  }
  Reference ref = src.ref;
  if (!src.digest_prefix.empty()) {
    BLZ_ASSIGN_OR_RETURN(ref, ResolveDigestPrefix(*store, src, nullptr));
  }
  BLZ_ASSIGN_OR_RETURN(std::optional<HeldVersion> held, FindHeld(*store, ref));
  if (!held.has_value()) {
    return NotFound("tag: " + ref.ToString() + " is not held in the local store " + store->dir() +
                    " (pull it first; `blz ls` lists what is held)");
  }
  BLZ_RETURN_IF_ERROR(store->RecordVersion(dst.registry.ToString(), dst.name, held->digest,
                                           held->size, dst.tag, held->manifest_digest));
  return *held;
}

}  // namespace blz::client
