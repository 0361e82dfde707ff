/* The floor of one executed step: what the agent contract itself makes a step cost, and nothing
 * else (benches/floors.sh runs it beside the agent).
 *
 *   step_floor rhai LOGDIR FLAGDIR N              a step run in process
 *   step_floor bash LOGDIR FLAGDIR N ROOT PATH    a step run as a chrooted process
 *
 * Per step I (0..N-1), as agent-contract.md 6.2 and 6.5 name them:
 *   - two new log files LOGDIR/t-I.log and LOGDIR/t-I.log.err (O_CREAT|O_EXCL, 0644); once five
 *     pairs exist, the pair of step I-5 is unlinked (retention keeps the 5 newest per path);
 *   - bash only: fork, the child's stdout/stderr on the two logs, chroot ROOT, chdir /,
 *     execv PATH I; waitpid;
 *   - one durable flag FLAGDIR/t_I: temp file, write, fsync, close, rename, fsync FLAGDIR.
 * LOGDIR and FLAGDIR must exist; flags left by an earlier run are replaced (as the agent does
 * with OVERLAY_ALWAYS_RUN_STEP=true), logs of an earlier run must be gone. Exit 1 on any error. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void die(const char *what) {
    perror(what);
    exit(1);
}

int main(int argc, char **argv) {
    if (argc < 5 || (strcmp(argv[1], "bash") == 0 && argc < 7)) {
        fprintf(stderr, "usage: step_floor rhai|bash LOGDIR FLAGDIR N [ROOT PATH]\n");
        return 2;
    }
    int bash = strcmp(argv[1], "bash") == 0;
    const char *logs = argv[2], *flags = argv[3];
    int n = atoi(argv[4]);
    int flag_dir = open(flags, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (flag_dir < 0) die(flags);
    char out[4096], err[4096], tmp[4096], flag[4096], arg[16];
    for (int i = 0; i < n; i++) {
        snprintf(out, sizeof out, "%s/t-%d.log", logs, i);
        snprintf(err, sizeof err, "%s/t-%d.log.err", logs, i);
        int o = open(out, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        int e = open(err, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (o < 0 || e < 0) die(out);
        if (bash) {
            snprintf(arg, sizeof arg, "%d", i);
            pid_t pid = fork();
            if (pid == 0) {
                char *av[] = {argv[6], arg, NULL};
                if (dup2(o, 1) == 1 && dup2(e, 2) == 2 && chroot(argv[5]) == 0 &&
                    chdir("/") == 0)
                    execv(argv[6], av);
                _exit(127);
            }
            int status;
            if (pid < 0 || waitpid(pid, &status, 0) < 0 || status != 0) die("step");
        }
        close(o);
        close(e);
        if (i >= 5) {
            snprintf(out, sizeof out, "%s/t-%d.log", logs, i - 5);
            snprintf(err, sizeof err, "%s/t-%d.log.err", logs, i - 5);
            if (unlink(out) < 0 || unlink(err) < 0) die(out);
        }
        snprintf(tmp, sizeof tmp, "%s/.t_%d.tmp", flags, i);
        snprintf(flag, sizeof flag, "%s/t_%d", flags, i);
        int f = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (f < 0) die(tmp);
        const char body[] = "2026-12-05 00:00:00.000000";
        if (write(f, body, sizeof body - 1) != (ssize_t)(sizeof body - 1) || fsync(f) < 0)
            die(tmp);
        close(f);
        if (rename(tmp, flag) < 0 || fsync(flag_dir) < 0) die(flag);
    }
    return 0;
}
