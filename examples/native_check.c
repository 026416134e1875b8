/*
 * native_check.c: runs every example's entries natively (clang-16 -O2, no
 * fdod involved) and prints one JSON object with what they returned, so
 * check_native.py can compare it with examples.json: the checksums there are
 * the values fdod must reproduce for the same IR.
 *
 * Usage: native_check [--no-timing]
 * The timing figures are informational (one call each, CLOCK_MONOTONIC around
 * the call only).
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

uint64_t interp_run(void);
int64_t interp_run_buf(const uint8_t* code, int64_t len, int64_t* out, int64_t out_cap);
uint64_t forest_run(void);
int64_t forest_predict(const int32_t* features, int64_t n_rows, int64_t stride, double* probs);
uint64_t lex_run(void);
int64_t lex_tokens(const uint8_t* text, int64_t len, int32_t* kinds, int64_t cap);
uint64_t sort_run(void);
int64_t sort_i64(int64_t* data, int64_t n);
uint64_t csv_run(void);
int64_t csv_parse(const uint8_t* text, int64_t len, int64_t* col_sums, int64_t ncols);

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void print_i64s(const char* key, const int64_t* v, int n) {
  if (key) printf("\"%s\": ", key);
  printf("[");
  for (int i = 0; i < n; ++i)
    printf("%s%lld", i ? ", " : "", (long long)v[i]);
  printf("]");
}

static void print_u8s(const char* key, const uint8_t* v, int n) {
  printf("\"%s\": [", key);
  for (int i = 0; i < n; ++i)
    printf("%s%u", i ? ", " : "", (unsigned)v[i]);
  printf("]");
}

/* JSON string with the escapes these inputs need. */
static void print_text(const char* key, const char* s) {
  printf("\"%s\": \"", key);
  for (; *s; ++s) {
    switch (*s) {
    case '"':
      printf("\\\"");
      break;
    case '\\':
      printf("\\\\");
      break;
    case '\n':
      printf("\\n");
      break;
    case '\r':
      printf("\\r");
      break;
    default:
      putchar(*s);
      break;
    }
  }
  printf("\"");
}

int main(int argc, char** argv) {
  int timing = !(argc > 1 && strcmp(argv[1], "--no-timing") == 0);
  struct {
    const char* name;
    uint64_t (*fn)(void);
  } noarg[] = {{"interp_run", interp_run},
               {"forest_run", forest_run},
               {"lex_run", lex_run},
               {"sort_run", sort_run},
               {"csv_run", csv_run}};
  int n_noarg = (int)(sizeof noarg / sizeof noarg[0]);

  printf("{\n  \"noarg\": {\n");
  for (int i = 0; i < n_noarg; ++i) {
    double t0 = now_ms();
    uint64_t v = noarg[i].fn();
    double t1 = now_ms();
    uint64_t again = noarg[i].fn(); /* must be deterministic across calls */
    printf("    \"%s\": {\"checksum\": %llu, \"repeatable\": %s", noarg[i].name,
           (unsigned long long)v, v == again ? "true" : "false");
    if (timing) printf(", \"ms\": %.2f", t1 - t0);
    printf("}%s\n", i + 1 < n_noarg ? "," : "");
  }
  printf("  },\n  \"buffer\": {\n");

  /* The same inputs are listed in examples.json ("buffer_example"); the
   * arguments are printed in that file's format so check_native.py can tell
   * that both describe the same call. */
  {
    const uint8_t code[] = {0x01, 0x01, 0x01, 0x02, 0x05, 0x19, 0x00}; /* OUT 1+2 */
    int64_t out[4] = {0, 0, 0, 0};
    printf("    \"interp_run_buf\": {\"args\": [{\"buffer\": \"u8\", ");
    print_u8s("data", code, (int)sizeof code);
    printf("}, %d, {\"buffer\": \"i64\", ", (int)sizeof code);
    print_i64s("data", out, 4);
    printf("}, 4], ");
    int64_t r = interp_run_buf(code, (int64_t)sizeof code, out, 4);
    printf("\"return\": %lld, \"buffers\": {\"2\": ", (long long)r);
    print_i64s(NULL, out, 4);
    printf("}},\n");
  }
  {
    int32_t features[2 * 16];
    for (int i = 0; i < 32; ++i)
      features[i] = (i * 97) % 1024;
    double probs[2] = {0, 0};
    printf("    \"forest_predict\": {\"args\": [{\"buffer\": \"i32\", \"data\": [");
    for (int i = 0; i < 32; ++i)
      printf("%s%d", i ? ", " : "", features[i]);
    printf("]}, 2, 16, {\"buffer\": \"f64\", \"data\": [0, 0]}], ");
    int64_t r = forest_predict(features, 2, 16, probs);
    printf("\"return\": %lld, \"buffers\": {\"3\": [%.17g, %.17g]}},\n", (long long)r, probs[0],
           probs[1]);
  }
  {
    const char* text = "int x = 0x1f + y_2; /* c */ s = \"a\\\"b\"; f(1.5e3) >>= 2 @";
    int32_t kinds[32];
    memset(kinds, 0, sizeof kinds);
    printf("    \"lex_tokens\": {\"args\": [{\"buffer\": \"u8\", ");
    print_text("text", text);
    printf("}, %d, {\"buffer\": \"i32\", \"data\": [", (int)strlen(text));
    for (int i = 0; i < 32; ++i)
      printf("%s%d", i ? ", " : "", kinds[i]);
    printf("]}, 32], ");
    int64_t r = lex_tokens((const uint8_t*)text, (int64_t)strlen(text), kinds, 32);
    printf("\"return\": %lld, \"buffers\": {\"2\": [", (long long)r);
    for (int i = 0; i < 32; ++i)
      printf("%s%d", i ? ", " : "", kinds[i]);
    printf("]}},\n");
  }
  {
    int64_t data[8] = {5, -3, 9, 1, 1, 0, 7, 2};
    printf("    \"sort_i64\": {\"args\": [{\"buffer\": \"i64\", ");
    print_i64s("data", data, 8);
    printf("}, 8], ");
    int64_t r = sort_i64(data, 8);
    printf("\"return\": %lld, \"buffers\": {\"0\": ", (long long)r);
    print_i64s(NULL, data, 8);
    printf("}},\n");
  }
  {
    const char* text = "a,b,c\n1,2,x\r\n-4,\"5,\"\"q\"\"\",6\n\n7,8,9";
    int64_t sums[3] = {0, 0, 0};
    printf("    \"csv_parse\": {\"args\": [{\"buffer\": \"u8\", ");
    print_text("text", text);
    printf("}, %d, {\"buffer\": \"i64\", ", (int)strlen(text));
    print_i64s("data", sums, 3);
    printf("}, 3], ");
    int64_t r = csv_parse((const uint8_t*)text, (int64_t)strlen(text), sums, 3);
    printf("\"return\": %lld, \"buffers\": {\"2\": ", (long long)r);
    print_i64s(NULL, sums, 3);
    printf("}}\n");
  }
  printf("  }\n}\n");
  return 0;
}
