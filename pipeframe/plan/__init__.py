"""Deploy planning: what the files say (desired state) vs what the warehouse records (deployed state).

Pure Python: no JVM. The engine applies a Plan; it never decides one.
"""
