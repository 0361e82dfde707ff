/* The floor of a chrooting step runner, shared by benches/agent_overhead.sh and
 * benches/scale.py: spawn_loop ROOT PATH N does N times fork, chroot ROOT, chdir /pkg,
 * execv PATH I, waitpid. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
int main(int argc, char **argv) {
    int n = atoi(argv[3]);
    for (int i = 0; i < n; i++) {
        char arg[16];
        snprintf(arg, sizeof arg, "%d", i);
        pid_t pid = fork();
        if (pid == 0) {
            char *av[] = {argv[2], arg, NULL};
            if (chroot(argv[1]) == 0 && chdir("/pkg") == 0) execv(argv[2], av);
            _exit(127);
        }
        int status;
        if (pid < 0 || waitpid(pid, &status, 0) < 0 || status != 0) return 1;
    }
    return 0;
}
