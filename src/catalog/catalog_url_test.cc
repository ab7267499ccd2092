#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "ckpt/catalog.h"
#include "testing/scoped_env.h"

namespace ckpt {
namespace {

using testing::ScopedEnv;

TEST(CatalogUrlTest, DefaultIsTheEnvironmentVariable) {
  ScopedEnv env("CKPT_CATALOG", "postgresql://db.example/ckpt");
  EXPECT_EQ(DefaultCatalogUrl(), "postgresql://db.example/ckpt");
}

TEST(CatalogUrlTest, DefaultIsUnderXdgStateHome) {
  ScopedEnv env("CKPT_CATALOG", "");
  ScopedEnv xdg("XDG_STATE_HOME", "/var/state");
  EXPECT_EQ(DefaultCatalogUrl(), "/var/state/ckpt/catalog.sqlite");
}

TEST(CatalogUrlTest, DefaultFallsBackToHome) {
  ScopedEnv env("CKPT_CATALOG", nullptr);
  ScopedEnv xdg("XDG_STATE_HOME", nullptr);
  ScopedEnv home("HOME", "/home/someone");
  EXPECT_EQ(DefaultCatalogUrl(),
            "/home/someone/.local/state/ckpt/catalog.sqlite");
  // XDG says to ignore a relative XDG_STATE_HOME.
  ScopedEnv relative("XDG_STATE_HOME", "relative/state");
  EXPECT_EQ(DefaultCatalogUrl(),
            "/home/someone/.local/state/ckpt/catalog.sqlite");
}

TEST(CatalogUrlTest, NoneTurnsTheCatalogOff) {
  auto catalog = OpenCatalog("none");
  ASSERT_TRUE(catalog.ok()) << catalog.status().ToString();
  EXPECT_EQ(*catalog, nullptr);
}

TEST(CatalogUrlTest, UnknownSchemesAndEmptyUrlsAreInvalid) {
  for (std::string url :
       {"", "mysql://h/db", "file:///x.sqlite", "sqlite://"}) {
    auto catalog = OpenCatalog(url);
    ASSERT_FALSE(catalog.ok()) << url;
    EXPECT_EQ(catalog.status().code(), ErrorCode::kInvalidArgument)
        << catalog.status().ToString();
  }
  auto bad = OpenCatalog("mysql://u:secret@h/db");
  EXPECT_EQ(bad.status().message().find("secret"), std::string::npos)
      << bad.status().ToString();
}

TEST(CatalogUrlTest, MalformedPostgresUrlIsInvalid) {
  auto catalog = OpenCatalog("postgresql://h/db?nosuchoption=1");
  ASSERT_FALSE(catalog.ok());
  EXPECT_EQ(catalog.status().code(), ErrorCode::kInvalidArgument)
      << catalog.status().ToString();
}

}  // namespace
}  // namespace ckpt
