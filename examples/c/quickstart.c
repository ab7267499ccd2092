/* ckpt from C (C11), through include/ckpt/c.h alone: save a state, load it
 * back and compare bit for bit, list the checkpoints, and show the error a
 * missing step gives. Run: quickstart_c ROOT (a path or URL of a new root:
 * a second run into the same one finds step 3 saved and fails). It exits 0
 * only if everything behaved as documented, so `make test` runs it. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/c.h"

static int failures = 0;

/* Reports a failed call and counts it. */
static int check(int code, char** err, const char* what) {
  if (code == CKPT_OK) return 1;
  fprintf(stderr, "quickstart_c: %s: %s: %s\n", what, ckpt_code_name(code),
          *err != NULL ? *err : "(no message)");
  ckpt_free(*err);
  *err = NULL;
  failures++;
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: quickstart_c ROOT\n");
    return 2;
  }
  printf("ckpt %s, ABI %d\n", ckpt_version(), ckpt_abi_version());
  if (ckpt_abi_version() != CKPT_ABI_VERSION) {
    fprintf(stderr, "quickstart_c: built for ABI %d, the library has %d\n",
            CKPT_ABI_VERSION, ckpt_abi_version());
    return 1;
  }

  char* err = NULL;
  ckpt_options_t* opts = ckpt_options_create();
  check(ckpt_options_set(opts, "keep_last", "2", &err), &err, "keep_last");
  /* A bad option is refused with a message naming it. */
  if (ckpt_options_set(opts, "keep_lats", "2", &err) != CKPT_INVALID_ARGUMENT ||
      err == NULL || strstr(err, "keep_lats") == NULL) {
    fprintf(stderr, "quickstart_c: an unknown option was not refused\n");
    failures++;
  }
  ckpt_free(err);
  err = NULL;

  ckpt_manager_t* m = NULL;
  if (!check(ckpt_manager_open(argv[1], opts, &m, &err), &err, "open")) {
    return 1;
  }
  ckpt_options_destroy(opts);

  /* The state: a 2x3 float tensor, an int64 vector, a blob, metadata. */
  float weights[2][3] = {{1.5f, -2.0f, 3.25f}, {0.0f, 1e-7f, -0.0f}};
  int64_t counters[4] = {1, -2, INT64_MAX, INT64_MIN};
  const char blob[] = "loader position 42";
  const char meta[] = "{\"optimizer\":\"adam\"}";
  int64_t wshape[2] = {2, 3};
  int64_t cshape[1] = {4};
  ckpt_entry_t save[4] = {
      {.name = "model.w",
       .kind = CKPT_KIND_TENSOR,
       .dtype = "F32",
       .ndim = 2,
       .shape = wshape,
       .data = weights,
       .nbytes = sizeof weights},
      {.name = "counters",
       .kind = CKPT_KIND_TENSOR,
       .dtype = "I64",
       .ndim = 1,
       .shape = cshape,
       .data = counters,
       .nbytes = sizeof counters},
      {.name = "loader",
       .kind = CKPT_KIND_BLOB,
       .data = (void*)blob,
       .nbytes = sizeof blob - 1},
      {.name = "config",
       .kind = CKPT_KIND_METADATA,
       .data = (void*)meta,
       .nbytes = sizeof meta - 1},
  };
  ckpt_state_t* state = ckpt_state_create();
  check(ckpt_state_add(state, save, 4, 0, &err), &err, "state_add");
  for (int64_t step = 1; step <= 3; step++) {
    counters[0] = step;
    ckpt_save_options_t* so = ckpt_save_options_create();
    ckpt_save_options_set_epoch(so, step / 2);
    check(ckpt_save_options_set_metric(so, "loss", 1.0 / (double)step, &err),
          &err, "metric");
    char* result = NULL;
    if (check(ckpt_manager_save(m, step, state, so, &result, &err), &err,
              "save")) {
      printf("saved step %" PRId64 ": %.60s...\n", step, result);
    }
    ckpt_free(result);
    ckpt_save_options_destroy(so);
  }
  ckpt_state_destroy(state);

  /* Load the newest into fresh buffers and compare bit for bit. */
  float w2[2][3];
  int64_t c2[4];
  memset(w2, 0xAB, sizeof w2);
  memset(c2, 0xAB, sizeof c2);
  ckpt_entry_t load[4] = {
      {.name = "model.w",
       .kind = CKPT_KIND_TENSOR,
       .dtype = "F32",
       .ndim = 2,
       .shape = wshape,
       .data = w2,
       .nbytes = sizeof w2},
      {.name = "counters",
       .kind = CKPT_KIND_TENSOR,
       .dtype = "I64",
       .ndim = 1,
       .shape = cshape,
       .data = c2,
       .nbytes = sizeof c2},
      {.name = "loader", .kind = CKPT_KIND_BLOB},
      {.name = "config", .kind = CKPT_KIND_METADATA},
  };
  ckpt_state_t* target = ckpt_state_create();
  check(ckpt_state_add(target, load, 4, 1, &err), &err, "state_add (load)");
  char* info = NULL;
  if (check(ckpt_manager_load(m, CKPT_NEWEST, target, 1, &info, &err), &err,
            "load")) {
    if (memcmp(w2, weights, sizeof w2) != 0 ||
        memcmp(c2, counters, sizeof c2) != 0) {
      fprintf(stderr, "quickstart_c: loaded tensors differ\n");
      failures++;
    }
    ckpt_entry_t got;
    check(ckpt_state_get(target, 2, &got, &err), &err, "state_get");
    if (got.nbytes != sizeof blob - 1 || memcmp(got.data, blob, got.nbytes)) {
      fprintf(stderr, "quickstart_c: loaded blob differs\n");
      failures++;
    }
    check(ckpt_state_get(target, 3, &got, &err), &err, "state_get");
    if (got.nbytes != sizeof meta - 1 || memcmp(got.data, meta, got.nbytes)) {
      fprintf(stderr, "quickstart_c: loaded metadata differs: %.*s\n",
              (int)got.nbytes, (const char*)got.data);
      failures++;
    }
    if (strstr(info, "\"step\":3") == NULL) {
      fprintf(stderr, "quickstart_c: loaded %s, not step 3\n", info);
      failures++;
    }
    printf("loaded: %.60s...\n", info);
  }
  ckpt_free(info);
  ckpt_state_destroy(target);

  /* List: retention kept the last two. */
  int64_t latest = -1;
  check(ckpt_manager_latest(m, &latest, &err), &err, "latest");
  char* list = NULL;
  if (check(ckpt_manager_list(m, &list, &err), &err, "list")) {
    printf("latest %" PRId64 ", list %.80s...\n", latest, list);
    if (latest != 3 || strstr(list, "\"step\":1,") != NULL ||
        strstr(list, "\"step\":2,") == NULL) {
      fprintf(stderr, "quickstart_c: expected steps 2 and 3, got %s\n", list);
      failures++;
    }
  }
  ckpt_free(list);

  /* A missing step: NotFound, with a message naming it. */
  ckpt_state_t* empty = ckpt_state_create();
  int code = ckpt_manager_load(m, 99, empty, 0, NULL, &err);
  printf("loading step 99: %s: %s\n", ckpt_code_name(code), err);
  if (code != CKPT_NOT_FOUND || err == NULL || strstr(err, "99") == NULL) {
    fprintf(stderr, "quickstart_c: a missing step did not give NotFound\n");
    failures++;
  }
  ckpt_free(err);
  err = NULL;
  ckpt_state_destroy(empty);

  ckpt_manager_close(m);
  printf("%s\n", failures == 0 ? "ok" : "FAILED");
  return failures == 0 ? 0 : 1;
}
