"""`sqltext.first_line`: the line of an error a user is shown, Spark's and Py4J's pages of JVM stack left out."""

from __future__ import annotations

from pipeframe.sqltext import first_line


def test_an_error_relayed_from_the_jvm_is_named_by_the_java_exception_not_by_py4j_call():
    relayed = Exception(
        "An error occurred while calling o103.save.\n"
        ": org.apache.spark.sql.delta.schema.DeltaInvariantViolationException: [DELTA_VIOLATE_CONSTRAINT_WITH_VALUES] "
        "CHECK constraint positive (amount > 0) violated by row with values:\n - amount : -1\n"
        "\tat org.apache.spark.sql.delta.schema.DeltaInvariantViolationException$.apply(InvariantViolationException.scala:70)\n")
    assert first_line(relayed) == ("DeltaInvariantViolationException: [DELTA_VIOLATE_CONSTRAINT_WITH_VALUES] CHECK "
                                   "constraint positive (amount > 0) violated by row with values:")
    assert first_line(Exception("An error occurred while calling o7.sql.\n: java.io.IOException\n\tat x")) == \
        "IOException"


def test_any_other_error_is_its_first_line_cut_at_300_characters():
    assert first_line(Exception("  [TABLE_OR_VIEW_NOT_FOUND] The table `x` cannot be found.\nJVM stacktrace:\n...")) \
        == "[TABLE_OR_VIEW_NOT_FOUND] The table `x` cannot be found."
    assert first_line(Exception("x" * 500)) == "x" * 300
    assert first_line(KeyError()) == "KeyError"
    assert first_line(Exception("An error occurred while calling o1.save.")) == \
        "An error occurred while calling o1.save."  # no cause relayed: the line as it is
