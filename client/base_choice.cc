#include "client/base_choice.h"

#include <algorithm>
#include <utility>

namespace blz::client {

std::vector<std::string> CandidateBases(const std::vector<HeldVersion>& held,
                                        std::string_view registry, std::string_view repository,
                                        std::string_view target, size_t max) {
  std::vector<const HeldVersion*> here, elsewhere;
  for (const HeldVersion& v : held) {
    const bool same = v.registry == registry && v.repository == repository;
    (same ? here : elsewhere).push_back(&v);
  }
  auto recent_first = [](const HeldVersion* a, const HeldVersion* b) {
    if (a->pulled_at != b->pulled_at) return a->pulled_at > b->pulled_at;
    return a->seq > b->seq;
  };
  std::stable_sort(here.begin(), here.end(), [](const HeldVersion* a, const HeldVersion* b) {
    return a->seq > b->seq;
  });
  std::stable_sort(elsewhere.begin(), elsewhere.end(), recent_first);
  std::vector<std::string> out;
  for (const auto* list : {&here, &elsewhere}) {
    for (const HeldVersion* v : *list) {
      if (out.size() >= max) return out;
      if (v->digest == target) continue;
      if (std::find(out.begin(), out.end(), v->digest) != out.end()) continue;
      out.push_back(v->digest);
    }
  }
  return out;
}

std::string BaseDisplayName(const std::vector<HeldVersion>& held, std::string_view digest) {
  const size_t colon = digest.find(':');
  const std::string hex(digest.substr(colon == std::string_view::npos ? 0 : colon + 1, 12));
  const HeldVersion* best = nullptr;
  for (const HeldVersion& v : held) {
    if (v.digest != digest || v.repository.empty()) continue;
    if (best == nullptr || v.seq > best->seq) best = &v;
  }
  if (best == nullptr) return hex;
  if (!best->tags.empty()) return best->repository + ":" + best->tags.front();
  return best->repository + "@" + hex;
}

Result<BaseChoice> ChooseBases(RegistryClient* client, const LocalStore& store,
                               std::string_view registry, std::string_view repository,
                               std::string_view target) {
  BaseChoice choice;
  BLZ_ASSIGN_OR_RETURN(std::vector<HeldVersion> held, store.AllVersions());
  std::vector<std::string> candidates = CandidateBases(held, registry, repository, target);
  if (candidates.empty()) return choice;

  Result<BaseAdvice> advice = client->GetBases(repository, target, candidates);
  if (advice.ok()) {
    choice.registry_ranked = true;
    for (const RemoteVersion& v : advice->bases) {
      choice.bases.push_back(v.digest);
      choice.names.push_back(v.name.empty() ? BaseDisplayName(held, v.digest) : v.name);
    }
    return choice;
  }
  if (advice.status().code() == Code::kUnauthorized) return advice.status();
  if (advice.status().code() != Code::kUnsupported) {
    choice.notes.push_back("the registry did not rank the " + std::to_string(candidates.size()) +
                           " held versions (" + advice.status().ToString() +
                           "); trying the most recent one of this repository");
  }
  // The old rule: the most recently pulled version of this registry+repository, which
  // CandidateBases put first when there is one.
  const bool have_here = std::any_of(held.begin(), held.end(), [&](const HeldVersion& v) {
    return v.registry == registry && v.repository == repository && v.digest != target;
  });
  if (have_here) {
    choice.bases = {candidates.front()};
    choice.names = {BaseDisplayName(held, candidates.front())};
  }
  return choice;
}

}  // namespace blz::client
