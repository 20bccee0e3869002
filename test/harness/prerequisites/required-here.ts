/**
 * Prints what CI requires of this machine, for `.ci/run`'s MLMODEL_TEST_REQUIRE: the
 * prerequisites a machine of this kind can always host (see requiredOn), separated by commas,
 * or nothing.
 */
import { requiredOn } from "./real-node.ts";

console.log(requiredOn().join(","));
