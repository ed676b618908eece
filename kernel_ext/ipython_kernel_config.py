# IPython kernel configuration that loads the raynb magics (%%ray_train,
# %ray_cluster) in every kernel of this IPython profile, so notebooks need no
# `%load_ext raynb`. Install it with kernel_ext/README.md:
#
#     cp kernel_ext/ipython_kernel_config.py "$(ipython locate profile)/"
#
# (or append these lines to an ipython_kernel_config.py you already have).
c = get_config()  # noqa: F821 - provided by IPython when it reads this file

# append: keeps any extensions configured elsewhere.
c.InteractiveShellApp.extensions.append("raynb")
