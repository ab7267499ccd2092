// A throwaway PostgreSQL cluster for tests, started by the test binary
// itself so that `ctest` alone runs the PostgreSQL tests:
//
//   1. initdb into a fresh temp folder (as the `postgres` user when run as
//      root: initdb refuses root), trust for everyone on 127.0.0.1 except
//      one user who must give a password (scram-sha-256);
//   2. pg_ctl start on 127.0.0.1 and a free port, with fsync off (the data
//      is thrown away);
//   3. a watchdog process that stops the cluster and removes the folder if
//      the test binary dies without doing it (a crash, a ctest timeout);
//   4. at exit, pg_ctl stop and the folder removed.
//
// Missing server binaries are an error that says to run
// scripts/install-deps.sh: a PostgreSQL test must fail there, not skip.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "catalog/sql.h"
#include "ckpt/status.h"

namespace ckpt::testing {

class PostgresServer {
 public:
  // The user who must log in with kPassword.
  static constexpr std::string_view kPasswordUser = "ckpt_pw";
  static constexpr std::string_view kPassword = "ckpt-secret";

  static Result<std::unique_ptr<PostgresServer>> Start();
  ~PostgresServer();
  PostgresServer(const PostgresServer&) = delete;
  PostgresServer& operator=(const PostgresServer&) = delete;

  int port() const { return port_; }
  // postgresql://postgres@127.0.0.1:PORT/DB (no password needed).
  std::string Url(std::string_view db = "postgres") const;
  // postgresql://ckpt_pw:PASSWORD@127.0.0.1:PORT/DB; the default database
  // is ckpt_pw's own.
  std::string PasswordUrl(std::string_view password,
                          std::string_view db = {}) const;
  // Creates an empty database and returns its URL.
  Result<std::string> NewDatabase();

 private:
  PostgresServer() = default;
  Status Stop();

  std::string dir_;  // the temp folder: data/, log, the socket
  std::string bin_;  // the server binaries' folder
  int port_ = 0;
  int watchdog_fd_ = -1;  // closing it (or dying) wakes the watchdog
  int owner_pid_ = 0;     // forked children never stop the server
  int databases_ = 0;
  std::unique_ptr<catalog::SqlConnection> admin_;
};

// The one server of this test binary: started on first use, stopped at
// exit. Its error (binaries missing, a start that failed) is returned on
// every call, so every PostgreSQL test fails with it.
Result<PostgresServer*> SharedPostgresServer();

}  // namespace ckpt::testing
