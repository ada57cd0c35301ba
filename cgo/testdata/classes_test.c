/* classes_test.c: print the C size->class mapping for every small size, so
 * the Go test can compare it with sizeclass.ClassOf (one table, two
 * languages, the same answers). */
#include <stdio.h>
#include <stdlib.h>

#include "../src/sizeclasses.h"

int main(void) {
  for (size_t s = 0; s <= TA_MAX_SMALL; s++) {
    unsigned c = _ta_class_of(s);
    if (c >= TA_NUM_CLASSES || _ta_classes[c].size < s) return 1;
    printf("%u\n", c);
  }
  return 0;
}
