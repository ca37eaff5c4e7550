#include "registry/scope.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "registry/auth.h"

namespace blz::registry {
namespace {

TEST(ScopeTest, PatternsMatchNamesNamespacesAndEverything) {
  EXPECT_TRUE(PatternMatches("*", "org/m"));
  EXPECT_TRUE(PatternMatches("*", "m"));
  EXPECT_TRUE(PatternMatches("org/*", "org/x"));
  EXPECT_TRUE(PatternMatches("org/*", "org/a/b"));
  EXPECT_FALSE(PatternMatches("org/*", "orgx/y"));
  EXPECT_FALSE(PatternMatches("org/*", "org"));
  EXPECT_FALSE(PatternMatches("org/*", "other/org/x"));
  EXPECT_TRUE(PatternMatches("org/m", "org/m"));
  EXPECT_FALSE(PatternMatches("org/m", "org/m2"));
  EXPECT_FALSE(PatternMatches("org/m", "org/m/x"));
  EXPECT_TRUE(PatternMatches("a/b/*", "a/b/c"));
  EXPECT_FALSE(PatternMatches("a/b/*", "a/bc"));
}

TEST(ScopeTest, ParsesRulesAndAddsTheirActionsUp) {
  auto s = Scope::Parse(" org/*:pull ; org/x:push,delete;models:pull,push ");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_EQ(s->rules().size(), 3u);
  EXPECT_EQ(s->ActionsOn("org/x"), kActionPull | kActionPush | kActionDelete);
  EXPECT_EQ(s->ActionsOn("org/y"), kActionPull);
  EXPECT_EQ(s->ActionsOn("models"), kActionPull | kActionPush);
  EXPECT_EQ(s->ActionsOn("other"), kNoActions);
  EXPECT_FALSE(s->IsAdmin());
  EXPECT_TRUE(s->GrantsAnywhere(kActionPush));
  EXPECT_FALSE(s->GrantsAnywhere(kActionAdmin));
  EXPECT_EQ(s->ToString(), "org/*:pull;org/x:push,delete;models:pull,push");
  // The canonical text parses to the same scope.
  EXPECT_EQ(Scope::Parse(s->ToString())->ToString(), s->ToString());
  // Actions come out in canonical order, duplicates merged.
  EXPECT_EQ(Scope::Parse("m:push,pull,push")->ToString(), "m:pull,push");
}

TEST(ScopeTest, AdminOnlyWithTheWildcard) {
  auto full = Scope::Parse("*:pull,push,delete,admin");
  ASSERT_TRUE(full.ok());
  EXPECT_TRUE(full->IsAdmin());
  EXPECT_EQ(full->ActionsOn("any/thing"), kRepositoryActions);  // admin is not a repo action
  auto s = Scope::Parse("org/*:admin");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Code::kInvalidArgument);
  EXPECT_NE(s.status().message().find("'admin' concerns no repository"), std::string::npos)
      << s.status().message();
}

TEST(ScopeTest, BadScopesAreRejectedWithClearMessages) {
  struct Case {
    std::string text;
    std::string message_part;
  };
  const std::vector<Case> cases = {
      {"", "scope is empty"},
      {"   ", "scope is empty"},
      {"org/*", "rule 1 ('org/*'): missing ':'"},
      {"org/*:", "rule 1 ('org/*:'): empty action"},
      {"org/*:pul", "unknown action 'pul' (expected pull, push, delete, admin)"},
      {"org/*:pull,,push", "empty action"},
      {"m:pull;;n:push", "rule 2 (''): empty rule"},
      {"m:pull;", "rule 2"},
      {"Org/m:pull", "pattern 'Org/m'"},
      {"org/*x:pull", "'*' is allowed only as the whole pattern or as a final '/*'"},
      {"o*g:pull", "'*' is allowed only"},
      {"**:pull", "'*' is allowed only"},
      {"/*:pull", "pattern '/*'"},
      {":pull", "empty repository pattern"},
      {"a//b:pull", "pattern 'a//b'"},
  };
  for (const Case& c : cases) {
    auto s = Scope::Parse(c.text);
    ASSERT_FALSE(s.ok()) << "'" << c.text << "' parsed";
    EXPECT_EQ(s.status().code(), Code::kInvalidArgument) << c.text;
    EXPECT_NE(s.status().message().find(c.message_part), std::string::npos)
        << "'" << c.text << "': " << s.status().message();
  }
}

TEST(ScopeTest, ActionsRoundTrip) {
  EXPECT_EQ(ActionsToString(kAllActions), "pull,push,delete,admin");
  EXPECT_EQ(ActionsToString(kNoActions), "");
  EXPECT_EQ(*ParseActions("delete , pull"), kActionPull | kActionDelete);
  EXPECT_FALSE(ParseActions("*").ok());
}

// ---- pure parts of registry/auth.h ----

TEST(AuthPureTest, Base64BothAlphabets) {
  EXPECT_EQ(Base64Encode("user:pass", false), "dXNlcjpwYXNz");
  EXPECT_EQ(Base64Encode("a", false), "YQ==");
  EXPECT_EQ(Base64Encode("ab", false), "YWI=");
  EXPECT_EQ(Base64Encode("\xfb\xff", true), "-_8");
  EXPECT_EQ(Base64Encode("\xfb\xff", false), "+/8=");
  for (const std::string& s : std::vector<std::string>{"", "a", "ab", "abc", "abcd",
                                                      std::string("\x00\x01\xff\xfe", 4)}) {
    EXPECT_EQ(*Base64Decode(Base64Encode(s, false), false), s);
    EXPECT_EQ(*Base64Decode(Base64Encode(s, true), true), s);
  }
  EXPECT_EQ(*Base64Decode("YQ", false), "a");  // missing padding is accepted
  EXPECT_FALSE(Base64Decode("Y", false).has_value());
  EXPECT_FALSE(Base64Decode("a b=", false).has_value());
  EXPECT_FALSE(Base64Decode("-_8", false).has_value());  // URL alphabet in standard base64
}

Principal TokenPrincipal(const std::string& scope, Principal::Kind kind) {
  Principal p;
  p.kind = kind;
  p.token_id = 7;
  p.token_name = "t";
  p.token_scope = *Scope::Parse(scope);
  p.grants = p.token_scope;
  return p;
}

AccessNeed On(const std::string& repo, ActionSet actions) {
  AccessNeed n;
  n.kind = AccessNeed::Kind::kRepository;
  n.repository = repo;
  n.actions = actions;
  return n;
}

TEST(AuthPureTest, DecisionsForEachKindOfCaller) {
  Principal anon;
  AccessNeed ping;
  ping.kind = AccessNeed::Kind::kAuthenticated;
  AccessNeed any_pull;
  any_pull.kind = AccessNeed::Kind::kAnyPull;
  AccessNeed admin;
  admin.kind = AccessNeed::Kind::kAdmin;

  // Anonymous: pulls on public registries only; /v2/ always challenged.
  EXPECT_EQ(Decide(anon, ping, false), Decision::kChallenge);
  EXPECT_EQ(Decide(anon, On("m", kActionPull), false), Decision::kAllow);
  EXPECT_EQ(Decide(anon, On("m", kActionPull), true), Decision::kChallenge);
  EXPECT_EQ(Decide(anon, On("m", kActionPush), false), Decision::kChallenge);
  EXPECT_EQ(Decide(anon, any_pull, false), Decision::kAllow);
  EXPECT_EQ(Decide(anon, any_pull, true), Decision::kChallenge);
  EXPECT_EQ(Decide(anon, admin, false), Decision::kChallenge);

  // An API token: its scope, plus public pulls; missing actions are 403.
  Principal ci = TokenPrincipal("org-a/*:pull,push", Principal::Kind::kApiToken);
  EXPECT_EQ(Decide(ci, ping, true), Decision::kAllow);
  EXPECT_EQ(Decide(ci, On("org-a/x", kActionPush), true), Decision::kAllow);
  EXPECT_EQ(Decide(ci, On("org-b/x", kActionPush), false), Decision::kDeny);
  EXPECT_EQ(Decide(ci, On("org-b/x", kActionPull), false), Decision::kAllow);  // public
  EXPECT_EQ(Decide(ci, On("org-b/x", kActionPull), true), Decision::kDeny);
  EXPECT_EQ(Decide(ci, On("org-a/x", kActionDelete), true), Decision::kDeny);
  EXPECT_EQ(Decide(ci, any_pull, true), Decision::kAllow);
  EXPECT_EQ(Decide(ci, admin, false), Decision::kDeny);
  EXPECT_EQ(Decide(TokenPrincipal("*:admin", Principal::Kind::kApiToken), admin, true),
            Decision::kAllow);

  // An access token granting less than its API token: insufficient scope (ask again).
  Principal access = TokenPrincipal("org-a/*:pull,push", Principal::Kind::kAccessToken);
  access.grants = *Scope::Parse("org-a/x:pull");
  EXPECT_EQ(Decide(access, On("org-a/x", kActionPull), true), Decision::kAllow);
  EXPECT_EQ(Decide(access, On("org-a/x", kActionPush), true), Decision::kChallengeInsufficient);
  EXPECT_EQ(Decide(access, On("org-b/x", kActionPush), true), Decision::kDeny);
  // An anonymous access token is anonymous.
  Principal anon_access;
  anon_access.kind = Principal::Kind::kAccessToken;
  anon_access.grants = *Scope::Parse("m:pull");
  EXPECT_EQ(Decide(anon_access, ping, false), Decision::kAllow);
  EXPECT_EQ(Decide(anon_access, On("m", kActionPush), false), Decision::kChallenge);
}

}  // namespace
}  // namespace blz::registry
