// The catalog suite on a real PostgreSQL server that this binary starts
// (testing/postgres_server.h). Without the server binaries these tests fail,
// saying to run scripts/install-deps.sh; they never skip.

#include <gtest/gtest.h>

#include <string>

#include "catalog/postgres/postgres_connection.h"
#include "ckpt/catalog.h"
#include "testing/catalog_conformance.h"
#include "testing/postgres_server.h"

namespace ckpt {
namespace {

using testing::PostgresServer;
using testing::SharedPostgresServer;

INSTANTIATE_TEST_SUITE_P(Postgres, CatalogConformanceTest,
                         ::testing::Values(CatalogConformanceParams{
                             .name = "Postgres",
                             .database = testing::CatalogDatabase::kPostgres}),
                         CatalogConformanceTestName);

class PostgresCatalogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<PostgresServer*> server = SharedPostgresServer();
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = *server;
  }
  PostgresServer* server_ = nullptr;
};

TEST_F(PostgresCatalogTest, TheRightPasswordOpens) {
  auto catalog = OpenCatalog(server_->PasswordUrl(PostgresServer::kPassword));
  ASSERT_TRUE(catalog.ok()) << catalog.status().ToString();
  // The password never shows in the catalog's name.
  EXPECT_EQ((*catalog)->url().find(PostgresServer::kPassword),
            std::string::npos);
  EXPECT_NE((*catalog)->url().find("***"), std::string::npos);
}

TEST_F(PostgresCatalogTest, AWrongPasswordIsAClearErrorAtOpen) {
  auto catalog = OpenCatalog(server_->PasswordUrl("not-the-password"));
  ASSERT_FALSE(catalog.ok());
  const Status& s = catalog.status();
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("password authentication failed"),
            std::string::npos)
      << s.ToString();
  EXPECT_NE(s.message().find("127.0.0.1:" + std::to_string(server_->port())),
            std::string::npos)
      << s.ToString();
  EXPECT_EQ(s.message().find("not-the-password"), std::string::npos)
      << s.ToString();
}

TEST_F(PostgresCatalogTest, AnUnreachableServerIsAClearErrorAtOpen) {
  // A port nobody listens on (the server's own, plus one, is free enough;
  // connect_timeout keeps a surprise from hanging the test).
  const std::string url = "postgresql://postgres@127.0.0.1:1/ckpt";
  auto catalog = OpenCatalog(url, {.connect_timeout_seconds = 5});
  ASSERT_FALSE(catalog.ok());
  const Status& s = catalog.status();
  EXPECT_EQ(s.code(), ErrorCode::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find(url), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("cannot connect"), std::string::npos)
      << s.ToString();
}

TEST_F(PostgresCatalogTest, AMissingDatabaseIsAClearErrorAtOpen) {
  auto catalog = OpenCatalog(server_->Url("no_such_db"));
  ASSERT_FALSE(catalog.ok());
  EXPECT_NE(catalog.status().message().find("no_such_db"), std::string::npos)
      << catalog.status().ToString();
}

TEST(PostgresUrlTest, PasswordsAreRedacted) {
  using catalog::RedactPassword;
  EXPECT_EQ(RedactPassword("postgresql://u:secret@h:5432/db"),
            "postgresql://u:***@h:5432/db");
  EXPECT_EQ(RedactPassword("postgresql://u@h/db"), "postgresql://u@h/db");
  EXPECT_EQ(RedactPassword("postgresql://h/db?user=u&password=secret&x=1"),
            "postgresql://h/db?user=u&password=***&x=1");
  EXPECT_EQ(RedactPassword("postgres://u:p@h"), "postgres://u:***@h");
}

}  // namespace
}  // namespace ckpt
