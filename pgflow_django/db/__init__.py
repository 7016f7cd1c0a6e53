"""The database side: the statement core and the statements more than one package sends (``query``,
``queries``), connection keywords (``connect``), PostgreSQL and migration guards (``dbguard``),
PGMQ installation (``pgmq_install``), the queue-identity upgrade audit (``upgrade``), catalog
snapshots (``catalog``), pooler detection (``pooler``) and the migration lock watcher
(``lock_watcher``). The Django models stay in ``pgflow_django.models``, where Django looks for them."""
