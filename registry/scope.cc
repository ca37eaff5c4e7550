#include "registry/scope.h"

#include <utility>

#include "registry/wire.h"

namespace blz::registry {
namespace {

constexpr std::pair<Action, std::string_view> kActionNames[] = {
    {kActionPull, "pull"}, {kActionPush, "push"}, {kActionDelete, "delete"},
    {kActionAdmin, "admin"}};

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

Status ValidatePattern(std::string_view pattern) {
  if (pattern == "*") return Status::Ok();
  if (pattern.empty()) return InvalidArgument("empty repository pattern");
  std::string_view name = pattern;
  if (pattern.size() >= 2 && pattern.substr(pattern.size() - 2) == "/*") {
    name = pattern.substr(0, pattern.size() - 2);
  }
  if (name.find('*') != std::string_view::npos) {
    return InvalidArgument("pattern '" + std::string(pattern) +
                           "': '*' is allowed only as the whole pattern or as a final '/*'");
  }
  Status s = ValidateRepositoryName(name);
  if (!s.ok()) return InvalidArgument("pattern '" + std::string(pattern) + "': " + s.message());
  return Status::Ok();
}

}  // namespace

std::string ActionsToString(ActionSet actions) {
  std::string out;
  for (const auto& [bit, name] : kActionNames) {
    if ((actions & bit) == 0) continue;
    if (!out.empty()) out += ',';
    out += name;
  }
  return out;
}

Result<ActionSet> ParseActions(std::string_view text) {
  ActionSet set = kNoActions;
  size_t start = 0;
  while (true) {
    size_t end = text.find(',', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view word = Trim(text.substr(start, end - start));
    if (word.empty()) return InvalidArgument("empty action (expected pull, push, delete, admin)");
    bool known = false;
    for (const auto& [bit, name] : kActionNames) {
      if (word == name) {
        set |= bit;
        known = true;
      }
    }
    if (!known) {
      return InvalidArgument("unknown action '" + std::string(word) +
                             "' (expected pull, push, delete, admin)");
    }
    if (end == text.size()) break;
    start = end + 1;
  }
  return set;
}

bool PatternMatches(std::string_view pattern, std::string_view repository) {
  if (pattern == "*") return true;
  if (pattern.size() >= 2 && pattern.substr(pattern.size() - 2) == "/*") {
    std::string_view prefix = pattern.substr(0, pattern.size() - 1);  // keeps the '/'
    return repository.size() > prefix.size() && repository.substr(0, prefix.size()) == prefix;
  }
  return pattern == repository;
}

Result<Scope> Scope::Parse(std::string_view text) {
  if (Trim(text).empty()) return InvalidArgument("scope is empty (expected PATTERN:ACTIONS)");
  std::vector<ScopeRule> rules;
  size_t start = 0;
  int index = 0;
  while (true) {
    size_t end = text.find(';', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view rule = Trim(text.substr(start, end - start));
    ++index;
    auto fail = [&](const std::string& why) {
      return InvalidArgument("scope rule " + std::to_string(index) + " ('" + std::string(rule) +
                             "'): " + why);
    };
    if (rule.empty()) return fail("empty rule (expected PATTERN:ACTIONS)");
    size_t colon = rule.rfind(':');
    if (colon == std::string_view::npos) return fail("missing ':' (expected PATTERN:ACTIONS)");
    std::string_view pattern = Trim(rule.substr(0, colon));
    Status ps = ValidatePattern(pattern);
    if (!ps.ok()) return fail(ps.message());
    Result<ActionSet> actions = ParseActions(rule.substr(colon + 1));
    if (!actions.ok()) return fail(actions.status().message());
    if ((*actions & kActionAdmin) != 0 && pattern != "*") {
      return fail("'admin' concerns no repository: it is allowed only with the pattern '*'");
    }
    rules.push_back({std::string(pattern), *actions});
    if (end == text.size()) break;
    start = end + 1;
  }
  return Scope(std::move(rules));
}

ActionSet Scope::ActionsOn(std::string_view repository) const {
  ActionSet set = kNoActions;
  for (const ScopeRule& r : rules_) {
    if (PatternMatches(r.pattern, repository)) set |= r.actions;
  }
  return ActionSet(set & kRepositoryActions);
}

bool Scope::GrantsAnywhere(ActionSet action) const {
  for (const ScopeRule& r : rules_) {
    if ((r.actions & action) == action) return true;
  }
  return false;
}

bool Scope::IsAdmin() const {
  for (const ScopeRule& r : rules_) {
    if (r.pattern == "*" && (r.actions & kActionAdmin) != 0) return true;
  }
  return false;
}

std::string Scope::ToString() const {
  std::string out;
  for (const ScopeRule& r : rules_) {
    if (!out.empty()) out += ';';
    out += r.pattern + ":" + ActionsToString(r.actions);
  }
  return out;
}

}  // namespace blz::registry
