// Hostile programs for the security suite (test_security.py): each entry tries
// one attack a tenant's program could make from inside fdod's exec worker and
// reports what happened as a number, so the test can assert it was denied
// (a negative errno) or contained. Compiled to IR at build time, submitted to a
// real fdod like any client program.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

// Where allocations escape to, so the optimizer cannot remove them.
void* volatile fdo_sink;

static long fail(void) {
  return -(long)errno;
}

// The process that started this worker: fdod.
long kill_daemon(void) {
  return kill(getppid(), SIGKILL) == 0 ? 0 : fail();
}

long kill_everyone(void) {
  return kill(-1, SIGKILL) == 0 ? 0 : fail();
}

long ptrace_daemon(void) {
  return ptrace(PTRACE_ATTACH, getppid(), 0, 0) == 0 ? 0 : fail();
}

long read_daemon_memory(void) {
  char local[64];
  struct iovec mine = {local, sizeof local};
  struct iovec theirs = {(void*)0x400000, sizeof local};
  return process_vm_readv(getppid(), &mine, 1, &theirs, 1, 0) >= 0 ? 0 : fail();
}

// How fdod's state dir was found in the review: its command line.
long read_daemon_cmdline(void) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/cmdline", (int)getppid());
  int fd = open(path, O_RDONLY);
  if (fd < 0) return fail();
  char buf[4096];
  long n = read(fd, buf, sizeof buf);
  close(fd);
  return n;
}

// mode 0: read, 1: write (truncate), 2: create a file in the directory `path`.
long touch_path(const char* path, long mode) {
  int fd;
  if (mode == 0) {
    fd = open(path, O_RDONLY);
  } else if (mode == 1) {
    fd = open(path, O_WRONLY | O_TRUNC);
  } else {
    char file[4096];
    snprintf(file, sizeof file, "%s/planted", path);
    fd = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  }
  if (fd < 0) return fail();
  close(fd);
  return 0;
}

long run_shell(void) {
  // system() starts a shell: the sandbox refuses the new process. glibc then
  // reports the shell as failed (status 127) with errno set.
  errno = 0;
  int rc = system("echo pwned > /tmp/fdo-security-pwned");
  if (rc == -1 || (WIFEXITED(rc) && WEXITSTATUS(rc) == 127 && errno != 0)) return fail();
  return rc;
}

long exec_program(void) {
  char* argv[] = {"/bin/true", NULL};
  execv("/bin/true", argv);
  return fail();
}

// A child that leaves the job's session and would outlive it.
long fork_and_linger(void) {
  pid_t pid = fork();
  if (pid == 0) {
    setsid();
    sleep(600);
    _exit(0);
  }
  return pid < 0 ? fail() : pid;
}

long open_socket(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return fail();
  close(fd);
  return 0;
}

static void* spin(void* arg) {
  (void)arg;
  for (volatile unsigned long n = 0;; n = n + 1) {
  }
  return NULL;
}

// Leaves a thread running after the job returns; answers the worker's pid.
long leave_thread(void) {
  pthread_t t;
  if (pthread_create(&t, NULL, spin, NULL) != 0) return -1;
  pthread_detach(t);
  return getpid();
}

long worker_pid(void) {
  return getpid();
}

// Raises its own address-space limit, then touches `mib` MiB.
long raise_limit_and_touch(long mib) {
  struct rlimit r = {RLIM_INFINITY, RLIM_INFINITY};
  long raised = setrlimit(RLIMIT_AS, &r) == 0 ? 1 : 0;
  char* p = malloc((size_t)mib << 20);
  if (!p) return raised ? -1000 : -ENOMEM;
  memset(p, 1, (size_t)mib << 20);
  fdo_sink = p;
  return raised ? 1 : 0;
}

// Leaks `mib` MiB per call; answers what the worker has mapped (bytes).
long leak(long mib) {
  char* p = malloc((size_t)mib << 20);
  if (!p) return -ENOMEM;
  memset(p, 1, (size_t)mib << 20);
  fdo_sink = p;
  FILE* f = fopen("/proc/self/statm", "r");
  long pages = 0;
  if (f) {
    if (fscanf(f, "%ld", &pages) != 1) pages = 0;
    fclose(f);
  }
  return pages * 4096;
}

// Prints `mib` MiB to stdout; answers how many MiB were accepted.
long flood(long mib) {
  static char line[1 << 20];
  memset(line, 'x', sizeof line);
  long accepted = 0;
  for (long i = 0; i < mib; ++i)
    if (fwrite(line, 1, sizeof line, stdout) == sizeof line) ++accepted;
  fflush(stdout);
  return accepted;
}

long say_and_exit(long status) {
  printf("goodbye from the program\n");
  fprintf(stderr, "a warning on stderr\n");
  exit((int)status);
}

long add(long a, long b) {
  return a + b;
}
