"""Django's PostgreSQL backend with the ORM pool's checkout check that costs no round trip (``base``)."""
