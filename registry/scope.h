// Token scopes: what an API token may do, and on which repositories (docs/registry-api.md,
// "Authentication and authorization"). Pure functions; no I/O, no HTTP.
//
// Grammar (the text stored with each token and given to `blz token create --scope`):
//   scope   = rule *( ";" rule )
//   rule    = pattern ":" actions
//   pattern = "*"                  every repository
//           | name "/*"            a namespace: org/* matches org/x and org/a/b, not orgx/y
//                                  (nor org itself)
//           | name                 exactly that repository
//   actions = action *( "," action ),  action = "pull" | "push" | "delete" | "admin"
// `name` is an OCI repository name (registry/wire.h ValidateRepositoryName). "admin" (the
// token admin API and storage status, which concern no repository) is only allowed with the
// pattern "*". Blanks around separators are ignored; an empty rule, an unknown action or a bad
// pattern is an error naming it.
//
// Actions granted by several rules add up: "org/*:pull;org/x:push" grants pull and push on
// org/x and pull on the rest of org/.
#ifndef BLZ_REGISTRY_SCOPE_H_
#define BLZ_REGISTRY_SCOPE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace blz::registry {

// A set of actions, as bits.
enum Action : uint8_t {
  kActionPull = 1,
  kActionPush = 2,
  kActionDelete = 4,
  kActionAdmin = 8,
};
using ActionSet = uint8_t;
inline constexpr ActionSet kNoActions = 0;
inline constexpr ActionSet kRepositoryActions = kActionPull | kActionPush | kActionDelete;
inline constexpr ActionSet kAllActions = kRepositoryActions | kActionAdmin;

// "pull,push" (in the order pull, push, delete, admin); "" for none.
std::string ActionsToString(ActionSet actions);
// "pull,push" -> set. Errors: kInvalidArgument naming an unknown or empty action.
Result<ActionSet> ParseActions(std::string_view text);

// Does `pattern` ("*", "org/*" or a name) match `repository`? Assumes both are well-formed.
bool PatternMatches(std::string_view pattern, std::string_view repository);

struct ScopeRule {
  std::string pattern;
  ActionSet actions = kNoActions;
};

class Scope {
 public:
  Scope() = default;
  explicit Scope(std::vector<ScopeRule> rules) : rules_(std::move(rules)) {}

  // Parses the grammar above. Errors: kInvalidArgument, e.g.
  //   "scope rule 2 ('org/*:pul'): unknown action 'pul' (expected pull, push, delete, admin)".
  static Result<Scope> Parse(std::string_view text);

  // The actions granted on `repository` (every matching rule's, admin excluded).
  ActionSet ActionsOn(std::string_view repository) const;
  // Is `action` granted by some rule (on any repository)?
  bool GrantsAnywhere(ActionSet action) const;
  // Is "admin" granted (a "*:...admin" rule)?
  bool IsAdmin() const;

  const std::vector<ScopeRule>& rules() const { return rules_; }
  bool empty() const { return rules_.empty(); }
  // The canonical text: rules joined by ';', actions in canonical order. Parse(ToString())
  // gives an equal scope.
  std::string ToString() const;

 private:
  std::vector<ScopeRule> rules_;
};

}  // namespace blz::registry

#endif  // BLZ_REGISTRY_SCOPE_H_
