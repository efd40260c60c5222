/* Prints a plan file's report through the runtime's C API: what an engine
 * embedding the wheel's runtime does first (scripts/wheel-check). */
#include <loadplan/runtime.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: plan_report PLAN\n");
    return 2;
  }
  loadplan_plan_t *plan = NULL;
  loadplan_status_t status = loadplan_plan_open_file(argv[1], &plan);
  char *text = NULL;
  if (!status) {
    const char *how = "read through the wheel's runtime";
    status = loadplan_plan_report(plan, how, strlen(how), &text, NULL);
  }
  if (status) {
    fprintf(stderr, "plan_report: %s: %s\n",
            loadplan_status_code_name(loadplan_status_code(status)),
            loadplan_status_message(status));
    loadplan_status_free(status);
    loadplan_plan_release(plan);
    return 1;
  }
  fputs(text, stdout);
  loadplan_text_free(text);
  loadplan_plan_release(plan);
  return 0;
}
