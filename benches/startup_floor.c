/* The floor of an agent start-up for a package whose one bash step is skipped (its flag exists):
 * what agent-contract.md makes such a run do, and nothing else (benches/floors.sh runs it beside
 * `skyhook-agent apply ROOT /pkg-skip`, both net of a spawn of /bin/true).
 *
 *   startup_floor CONFIG FLAG FLAGS_DIR
 *
 * Reads CONFIG (the package's config.json) whole, checks that the step flag FLAG exists, writes
 * the START flag durably into FLAGS_DIR (section 6.1: temp file, fsync, rename, fsync the
 * directory; Rust's [fix] durability) and prints the skip line. Exit 1 on any error. */
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: startup_floor CONFIG FLAG FLAGS_DIR\n");
        return 2;
    }
    char buf[65536], tmp[4096], start[4096];
    int c = open(argv[1], O_RDONLY | O_CLOEXEC);
    if (c < 0 || read(c, buf, sizeof buf) < 0) return 1;
    close(c);
    struct stat st;
    if (stat(argv[2], &st) < 0) return 1;
    int dir = open(argv[3], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    snprintf(tmp, sizeof tmp, "%s/.START.tmp", argv[3]);
    snprintf(start, sizeof start, "%s/START", argv[3]);
    int f = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (dir < 0 || f < 0 || fsync(f) < 0 || close(f) < 0 || rename(tmp, start) < 0 ||
        fsync(dir) < 0)
        return 1;
    printf("Skipping t.sh because %s exists\n", argv[2]);
    return 0;
}
