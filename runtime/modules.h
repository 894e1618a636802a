/* modules.h - the runtime's primitive families, one CS_FAMILY line each (X-macro). */
CS_FAMILY(loop)
CS_FAMILY(util)
CS_FAMILY(ssh)
CS_FAMILY(yaml)
CS_FAMILY(term)
CS_FAMILY(crypto)
CS_FAMILY(fs)
CS_FAMILY(archive)
